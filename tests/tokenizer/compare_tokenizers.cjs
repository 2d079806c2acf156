// Checks `m3 tokenize` against independent tokenizers on the corpus of corpus.cjs:
//   1. o200k_base tokenizer.json: m3 ids == js-tiktoken ids (OpenAI's ranks, the reference BPE),
//      invalid UTF-8 included (by m3's documented rule, see referenceForBytes);
//   2. the same tokenizer.json: m3 ids == Hugging Face tokenizers (the official Rust library's
//      Node binding) on every valid-UTF-8 text;
//   3. the small M3 tokenizer.json that `m3 make-checkpoint` writes: m3 ids == HF tokenizers;
//   4. m3 decodes its ids back to the input bytes, for both tokenizer files.
// HF has no "plain text" mode for special tokens (it always matches added tokens), so m3 runs
// with --special in the HF comparisons.
//
// usage: node compare_tokenizers.cjs NODE_MODULES_DIR M3_BIN WORK_DIR O200K_JSON SMALL_JSON
// Prints one line per check and a final "tokenizer-tiktoken: N passed, M failed"; exits 1 on failure.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { loadO200k } = require('./o200k_ranks.cjs');
const { buildCorpus, scanUtf8 } = require('./corpus.cjs');

const [nodeModules, m3Bin, workDir, o200kJson, smallJson] = process.argv.slice(2);
if (!smallJson) {
  console.error('usage: node compare_tokenizers.cjs NODE_MODULES_DIR M3_BIN WORK_DIR O200K_JSON SMALL_JSON');
  process.exit(2);
}
const { Tiktoken } = require(path.join(nodeModules, 'js-tiktoken', 'dist', 'lite.cjs'));
const hf = require(path.join(nodeModules, 'tokenizers'));
const o200k = loadO200k(nodeModules);
const tiktoken = new Tiktoken(o200k.data);
fs.mkdirSync(workDir, { recursive: true });

// ---- references ----

const tiktokenIds = (c) => (c.special ? tiktoken.encode(c.text, 'all', []) : tiktoken.encode(c.text, [], []));

// m3's rule for invalid UTF-8: every byte that is not part of a valid character is a piece of
// its own (its single-byte token), and the valid stretches between such bytes are tokenized as
// separate texts. js-tiktoken only takes strings, so we apply the rule here and let it tokenize
// each valid stretch.
const singleByteRank = Array.from({ length: 256 }, (_, b) => o200k.rankOf.get(String.fromCharCode(b)));
function tiktokenIdsForBytes(buf) {
  const ids = [];
  let runStart = 0, pos = 0;
  const flush = (end) => { if (end > runStart) ids.push(...tiktoken.encode(buf.subarray(runStart, end).toString('utf8'), [], [])); };
  while (pos < buf.length) {
    const [kind, len] = scanUtf8(buf, pos);
    if (kind === 'ok') { pos += len; continue; }
    flush(pos);
    for (let i = 0; i < len; i++) ids.push(singleByteRank[buf[pos + i]]);
    pos += len;
    runStart = pos;
  }
  flush(buf.length);
  return ids;
}

// HF tokenizers numbers added tokens itself, right after the model vocabulary, and ignores their
// "id" in the file when that differs (o200k's specials are 199999 and 200018, but its vocabulary
// ends at 199997, so HF makes them 199998 and 199999). m3 keeps the ids the file states (for M3,
// whose added tokens follow the vocabulary directly, both agree). To compare tokenizations we
// map HF's added-token ids back to the file's.
function hfTokenizer(tokenizerJson) {
  const tokenizer = hf.Tokenizer.fromFile(tokenizerJson);
  const fileIds = new Map();
  for (const t of JSON.parse(fs.readFileSync(tokenizerJson, 'utf8')).added_tokens) {
    fileIds.set(tokenizer.tokenToId(t.content), t.id);
  }
  return async (text) => {
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    return Array.from(encoding.getIds(), (id) => (fileIds.has(id) ? fileIds.get(id) : id));
  };
}

// ---- m3 ----

// Ids of several files from one `m3 tokenize` run (one line each): the o200k vocabulary takes ~2 s
// to load, and m3 loads it once for all of them.
function m3EncodeMany(tokenizerJson, files, special) {
  if (files.length === 0) return [];
  const out = execFileSync(m3Bin, ['tokenize', '-m', tokenizerJson, ...files.flatMap((f) => ['--file', f]),
                                   ...(special ? ['--special'] : [])], { maxBuffer: 1 << 28 }).toString();
  const lines = out.split('\n');
  if (lines.length !== files.length + 1 || lines[files.length] !== '') {
    throw new Error(`m3 tokenize printed ${lines.length - 1} lines for ${files.length} files`);
  }
  return lines.slice(0, files.length).map((l) => (l === '' ? [] : l.split(',').map(Number)));
}
// m3's ids of each case, with --special where special(c) says.
function m3EncodeCases(tokenizerJson, cases, file, special) {
  const ids = new Array(cases.length);
  for (const flag of [false, true]) {
    const picked = cases.map((c, i) => i).filter((i) => special(cases[i]) === flag);
    m3EncodeMany(tokenizerJson, picked.map((i) => file(cases[i])), flag).forEach((got, k) => { ids[picked[k]] = got; });
  }
  return ids;
}
function m3Decode(tokenizerJson, ids, name) {
  const file = path.join(workDir, `${name}.ids`);
  fs.writeFileSync(file, ids.join(','));
  return execFileSync(m3Bin, ['tokenize', '-m', tokenizerJson, '--decode', '--file', file], { maxBuffer: 1 << 28 });
}

// ---- bookkeeping ----

let passed = 0, failed = 0;
const tokensAgreed = { tiktoken: 0, hf: 0 };
const firstDifference = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; };

function compare(label, got, expected, describe, counter) {
  const at = firstDifference(got, expected);
  if (at === got.length && at === expected.length) {
    passed++;
    tokensAgreed[counter] += got.length;
    console.log(`PASS ${label}: ${got.length} tokens`);
    return;
  }
  failed++;
  console.log(`FAIL ${label}: first difference at token ${at} (m3 has ${got.length}, reference ${expected.length})`);
  console.log(`  m3:        ${describe(got.slice(Math.max(0, at - 2), at + 4))}`);
  console.log(`  reference: ${describe(expected.slice(Math.max(0, at - 2), at + 4))}`);
}
const describeO200k = (ids) => ids.map((id) => `${id}:${JSON.stringify((o200k.bytesOf[id] || Buffer.from('?')).toString('latin1'))}`).join(' ');

function checkRoundTrip(label, tokenizerJson, idLists, inputs) {
  const decoded = m3Decode(tokenizerJson, idLists.flat(), label);
  const original = Buffer.concat(inputs);
  if (decoded.equals(original)) {
    passed++;
    console.log(`PASS ${label}: ${idLists.flat().length} ids decode to the ${original.length} input bytes`);
  } else {
    failed++;
    console.log(`FAIL ${label}: decoded ${decoded.length} bytes, expected ${original.length}, ` +
                `first difference at byte ${firstDifference(decoded, original)}`);
  }
}

// ---- the checks ----

async function main() {
  const cases = buildCorpus();
  for (const c of cases) fs.writeFileSync(path.join(workDir, `${c.name}.txt`), c.bytes);
  const file = (c) => path.join(workDir, `${c.name}.txt`);
  const hasText = (c) => c.text !== undefined;

  // 1. o200k: m3 vs js-tiktoken.
  const o200kIds = m3EncodeCases(o200kJson, cases, file, (c) => Boolean(c.special));
  for (const [i, c] of cases.entries()) {
    compare(`o200k tiktoken ${c.name}`, o200kIds[i], hasText(c) ? tiktokenIds(c) : tiktokenIdsForBytes(c.bytes), describeO200k, 'tiktoken');
  }
  checkRoundTrip('o200k round-trip', o200kJson, o200kIds, cases.map((c) => c.bytes));

  // 2. o200k: m3 --special vs HF tokenizers (reusing m3's ids where --special changes nothing).
  const hfO200k = hfTokenizer(o200kJson);
  const o200kSpecials = Object.keys(o200k.data.special_tokens);
  const reuse = (c) => c.special || !o200kSpecials.some((s) => c.text.includes(s));
  const again = cases.filter((c) => hasText(c) && !reuse(c));
  const againIds = new Map(m3EncodeMany(o200kJson, again.map(file), true).map((ids, k) => [again[k], ids]));
  for (const [i, c] of cases.entries()) {
    if (!hasText(c)) continue;
    const got = reuse(c) ? o200kIds[i] : againIds.get(c);
    compare(`o200k hf ${c.name}`, got, await hfO200k(c.text), describeO200k, 'hf');
  }

  // 3. the small M3 tokenizer from make-checkpoint: m3 --special vs HF tokenizers.
  const hfSmall = hfTokenizer(smallJson);
  const smallIds = m3EncodeMany(smallJson, cases.map(file), true);
  for (const [i, c] of cases.entries()) {
    if (hasText(c)) compare(`small-m3 hf ${c.name}`, smallIds[i], await hfSmall(c.text), (ids) => ids.join(' '), 'hf');
  }
  checkRoundTrip('small-m3 round-trip', smallJson, smallIds, cases.map((c) => c.bytes));

  console.log(`tokens agreeing with js-tiktoken: ${tokensAgreed.tiktoken}; with HF tokenizers: ${tokensAgreed.hf}`);
  console.log(`tokenizer-tiktoken: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
