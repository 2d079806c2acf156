#!/usr/bin/env bash
# The main job on its built-in default: install packages, build, write the `tiny` checkpoint if it
# is missing, and generate from a prompt of ~93K tokens (this repo's docs, six times), long enough that every MSA layer
# attends to 4 of its 2,000+ visible blocks. Prints prefill and decode tokens/s at the end.
# The weights are random, so the generated text is noise: this shows the machinery and its speed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
model=models/tiny
if [ ! -f "$model/config.json" ]; then
  ./build/release/m3 make-checkpoint --preset tiny --seed 1 --out "$model"
fi
./build/release/m3 inspect "$model" --context 4096
prompt=$(mktemp)
trap 'rm -f "$prompt"' EXIT
for i in $(seq 1 6); do cat README.md docs/ARCHITECTURE.md; done > "$prompt"
./build/release/m3 generate -m "$model" -f "$prompt" -n 64 --temp 0.8 --top-p 0.95 --seed 1 "$@"
