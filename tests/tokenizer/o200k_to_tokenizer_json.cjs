// Converts js-tiktoken's o200k_base ranks into a Hugging Face tokenizer.json (byte-level BPE),
// so m3's tokenizer can be checked against OpenAI's real 200k vocabulary.
//
// usage: node o200k_to_tokenizer_json.cjs NODE_MODULES_DIR OUT_JSON
//
// tiktoken has ranks only: at each step it merges the adjacent pair whose concatenation has the
// lowest rank. HF BPE needs explicit merges (left, right). For every token T we run tiktoken's own
// procedure on T's bytes and record the last merge, the pair (a, b) that finally becomes T. That one
// merge per token is enough: inside a longer word, T's bytes can only become T if no merge crossed
// T's boundary first, and then the merges inside T happen exactly as they do on T alone, ending
// in the same (a, b). Tokens that tiktoken never builds from their bytes (the procedure stops
// short) get no merge; tiktoken still emits them when a whole regex piece equals them, which
// is HF's "ignore_merges": true, set below. Merges are listed in the rank order of T, so
// "lower merge index first" means the same as "lower rank first".
'use strict';
const fs = require('fs');
const { loadO200k } = require('./o200k_ranks.cjs');

const [nodeModules, outPath] = process.argv.slice(2);
if (!nodeModules || !outPath) {
  console.error('usage: node o200k_to_tokenizer_json.cjs NODE_MODULES_DIR OUT_JSON');
  process.exit(2);
}
const { data: o200k, rankOf, bytesOf } = loadO200k(nodeModules);

// ---- GPT-2 byte <-> unicode mapping (vocabulary strings are stored mapped) ----
const byteToChar = [];
{
  let shifted = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    byteToChar[b] = String.fromCodePoint(printable ? b : shifted++);
  }
}
const mapped = (key) => Array.from(key, (c) => byteToChar[c.charCodeAt(0)]).join('');

// ---- tiktoken's merge procedure on one token's bytes; returns the final (a, b) or null ----
function lastMerge(key) {
  let parts = Array.from(key);
  let last = null;
  while (parts.length > 1) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rankOf.get(parts[i] + parts[i + 1]);
      if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) return null;  // stuck: tiktoken never builds this token from bytes
    last = [parts[best], parts[best + 1]];
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
  return last;
}

const vocab = {};
const merges = [];
let unreachable = 0;
for (let rank = 0; rank < bytesOf.length; rank++) {
  const bytes = bytesOf[rank];
  if (!bytes) continue;
  const key = bytes.toString('latin1');
  vocab[mapped(key)] = rank;
  if (bytes.length < 2) continue;
  const pair = lastMerge(key);
  if (pair && pair[0] + pair[1] === key) merges.push([mapped(pair[0]), mapped(pair[1])]);
  else unreachable++;
}

const special = o200k.special_tokens;  // {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
const tokenizer = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: Object.entries(special).map(([content, id]) => ({
    id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  })),
  normalizer: null,
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: o200k.pat_str }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges,
  },
};
fs.writeFileSync(outPath, JSON.stringify(tokenizer));
console.log(`o200k_base: ${Object.keys(vocab).length} tokens, ${merges.length} merges, ` +
            `${unreachable} tokens not built by merges, ${Object.keys(special).length} special tokens -> ${outPath}`);
