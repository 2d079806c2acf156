#!/usr/bin/env bash
# Reproduces the tables of docs/BENCHMARKS.md on this machine (minutes; run on an idle machine).
# Usage: scripts/bench.sh [OUTPUT_FILE]   (default: bench-results.md)
# M3_BENCH_SLICE=1 adds the whole-model run of the m3-slice preset (M3's layer widths, 4.4 GB
# checkpoint in models/m3-slice; about 25 minutes on 2 cores, most of it prefilling 64K tokens).
# Each table runs with the f32 and the bf16 cache (--cache-type). On a machine shared with other
# work, add --clock cpu to the m3 bench commands (process CPU time / threads).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results.md}"
bash scripts/build.sh release
m3=./build/release/m3
for preset in tiny small; do
  [ -f "models/$preset/config.json" ] || $m3 make-checkpoint --preset "$preset" --seed 1 --out "models/$preset"
done
{
  echo "# m3 bench results ($(date -u +%Y-%m-%d), $(nproc) threads)"
  echo
  echo '## Attention layer: MSA vs dense'
  echo
  for ct in f32 bf16; do
    echo '```'
    echo "$m3 bench attention --shapes m3,tiny --cache-type $ct"
    echo '```'
    $m3 bench attention --shapes m3,tiny --cache-type "$ct"
    echo
  done
  echo '## Decode split across threads (one M3 KV group on all threads)'
  echo
  echo '```'
  echo "$m3 bench attention --shapes m3-group --contexts 4096,16384,65536,131072 --dense-max 65536 -r 3 --cache-type bf16"
  echo '```'
  $m3 bench attention --shapes m3-group --contexts 4096,16384,65536,131072 --dense-max 65536 -r 3 --cache-type bf16
  echo
  echo '## Whole model'
  echo
  for preset in tiny small; do
    for ct in f32 bf16; do
      echo '```'
      echo "$m3 bench -m models/$preset -p 512 -n 128 -d 0,16384,65536 --cache-type $ct"
      echo '```'
      $m3 bench -m "models/$preset" -p 512 -n 128 -d 0,16384,65536 --cache-type "$ct"
      echo
    done
  done
  if [ "${M3_BENCH_SLICE:-0}" = 1 ]; then
    [ -f models/m3-slice/config.json ] || $m3 make-checkpoint --preset m3-slice --seed 1 --out models/m3-slice
    echo '```'
    echo "$m3 bench -m models/m3-slice -p 512 -n 128 -d 0,16384,65536 -r 1 --cache-type bf16"
    echo '```'
    $m3 bench -m models/m3-slice -p 512 -n 128 -d 0,16384,65536 -r 1 --cache-type bf16
    echo
  fi
  echo '## Weight matmul vs OpenBLAS and oneDNN'
  echo
  echo '```'
  echo "$m3 bench libs -m 1,16,512 -s 4096x4096"
  echo '```'
  $m3 bench libs -m 1,16,512 -s 4096x4096
  echo
  echo '## Vision'
  echo
  echo '```'
  echo "$m3 bench vision -r 3 --video-seconds 20"
  echo '```'
  $m3 bench vision -r 3 --video-seconds 20
  echo
  echo '## Serving'
  echo
  for d in 0 4096; do
    echo '```'
    echo "$m3 bench batch -m models/small -B 1,2,4,8 -d $d"
    echo '```'
    $m3 bench batch -m models/small -B 1,2,4,8 -d "$d"
    echo
  done
  echo '```'
  echo "/usr/bin/python3 scripts/bench_serve.py --m3 $m3 -m models/small --clients 4 --requests 4 --max-tokens 128 --prompt-words 40 --cache-mb 1024"
  echo '```'
  /usr/bin/python3 scripts/bench_serve.py --m3 "$m3" -m models/small --clients 4 --requests 4 --max-tokens 128 --prompt-words 40 --cache-mb 1024
  echo
  echo '```'
  echo "$m3 bench json -m models/tiny"
  echo '```'
  $m3 bench json -m models/tiny
} | tee "$out"
