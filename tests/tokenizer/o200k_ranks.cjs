// Reads js-tiktoken's o200k_base data: the split pattern, the special tokens and the ranks.
// bpe_ranks is "name offset b64 b64 ..." lines; token i of a line has rank offset + i.
'use strict';
const path = require('path');

function loadO200k(nodeModules) {
  const mod = require(path.join(nodeModules, 'js-tiktoken', 'dist', 'ranks', 'o200k_base.cjs'));
  const data = mod.default || mod;
  const rankOf = new Map();  // latin1 string of the token's bytes -> rank
  const bytesOf = [];        // rank -> Buffer
  for (const line of data.bpe_ranks.split('\n')) {
    if (!line) continue;
    const [, offsetText, ...tokens] = line.split(' ');
    const offset = Number.parseInt(offsetText, 10);
    tokens.forEach((b64, i) => {
      const bytes = Buffer.from(b64, 'base64');
      rankOf.set(bytes.toString('latin1'), offset + i);
      bytesOf[offset + i] = bytes;
    });
  }
  return { data, rankOf, bytesOf };
}

module.exports = { loadO200k };
