#!/usr/bin/env bash
# This engine against the peer, llama.cpp's own MiniMax-M3 (../shared/peer), side by side on this machine
# (issue 10's table, docs/BENCHMARKS.md): a prefill of DEPTH tokens, then DECODE decode steps at that depth, on
# each CPU path the machine has, one checkpoint for both engines.
#   llama.cpp: its native build (../shared/peer/setup.sh: AVX-512 where the CPU has it) and, for the AVX2 path on an
#     AVX-512 machine, an AVX2 build of the same source; flash attention off and on (its better one counts);
#     n_batch 2048, n_ubatch 512, f16 weights and f16 cache.
#   ours: `M3_CPU=PATH m3 bench -d DEPTH --cache-type bf16` (the fill row is the prefill, in chunks of 512).
# Rounds alternate between the engines and paths, so a drift of the machine's speed hits them alike.
# Usage: scripts/bench_peer.sh [PRESET] [OUTPUT_FILE]   (default: small, peer-PRESET.md)
# Env: PEER_DIR (/tmp/m3-peer), DEPTH (16384), DECODE (128), THREADS (2), ROUNDS (2),
#      PATHS (x86: avx2, and avx512 where the CPU has it; elsewhere "default", the path m3 picks). The peer's
#      builds take 7-12 minutes each on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-small}"
out="${2:-peer-$preset.md}"
P="${PEER_DIR:-/tmp/m3-peer}"
depth="${DEPTH:-16384}" decode="${DECODE:-128}" threads="${THREADS:-2}" rounds="${ROUNDS:-2}"
has_avx512=0
grep -qw avx512f /proc/cpuinfo && has_avx512=1
if grep -qw avx2 /proc/cpuinfo; then
  paths="${PATHS:-avx2$([ $has_avx512 = 1 ] && echo ' avx512')}"
else
  paths="${PATHS:-default}"
fi
m3=./build/release/m3
[ -x "$m3" ] || bash scripts/build.sh release
dir="models/$preset"
[ -f "$dir/config.json" ] || $m3 make-checkpoint --preset "$preset" --seed 1 --out "$dir"

# The peer: the native build, and an AVX2 one where the native build is AVX-512.
[ -x "$P/m3_bench" ] || PEER_DIR="$P" bash ../shared/peer/setup.sh
L="$P/llama.cpp"
peer_of() {  # the peer's timer for a CPU path
  if [ "$1" = avx2 ] && [ $has_avx512 = 1 ]; then echo "$P/m3_bench_avx2"; else echo "$P/m3_bench"; fi
}
if [[ " $paths " == *" avx2 "* ]] && [ $has_avx512 = 1 ] && [ ! -x "$P/m3_bench_avx2" ]; then
  echo "== the peer's AVX2 build" >&2
  cmake -S "$L" -B "$L/build-avx2" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_AVX512=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_SERVER=OFF > /dev/null
  cmake --build "$L/build-avx2" -j"$(nproc)" --target llama-bench > /dev/null
  g++ -O2 -std=c++17 ../shared/peer/m3_bench.cpp -I"$L/include" -I"$L/ggml/include" -L"$L/build-avx2/bin" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$L/build-avx2/bin" -o "$P/m3_bench_avx2"
fi
gguf="$P/$preset.f16.gguf"
if [ ! -f "$gguf" ] || [ "$dir/model.safetensors" -nt "$gguf" ]; then
  echo "== converting $dir for the peer" >&2
  /usr/bin/python3 ../shared/peer/m3_to_gguf.py "$dir" "$gguf" --outtype f16 > /dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for path in $paths; do
    for fa in 0 1; do
      echo "== round $r, $path: llama.cpp, flash attention $fa" >&2
      "$(peer_of "$path")" "$gguf" "$depth" "$decode" "$threads" 2048 512 "$fa" 2> /dev/null \
        | sed -n "s/^/$r $path llama_fa$fa /p" >> "$tmp/peer.txt"
    done
    echo "== round $r, $path: ours" >&2
    cpu=(); [ "$path" = default ] || cpu=(M3_CPU="$path")
    env "${cpu[@]}" $m3 bench -m "$dir" -p 512 -n "$decode" -d "$depth" -r 1 -t "$threads" --cache-type bf16 \
      --skip-bounds -o jsonl 2> /dev/null | sed -n "s/^{/$r $path ours {/p" >> "$tmp/ours.txt"
  done
done

python3 - "$tmp" "$preset" "$depth" "$decode" "$threads" "$paths" > "$out" <<'EOF'
import json, re, sys
tmp, preset, depth, decode, threads, paths = sys.argv[1:7]
runs = {}  # (round, path) -> {engine: (prefill t/s, decode t/s)}
for line in open(f"{tmp}/peer.txt"):
    r, path, engine, text = line.split(" ", 3)
    m = re.search(r"prefill [\d.]+ s = ([\d.]+) t/s \| decode \d+ @ depth \d+: [\d.]+ s = ([\d.]+) t/s", text)
    if m:
        runs.setdefault((r, path), {})[engine] = (float(m.group(1)), float(m.group(2)))
for line in open(f"{tmp}/ours.txt"):
    r, path, engine, text = line.split(" ", 3)
    row = json.loads(text)
    cell = runs.setdefault((r, path), {}).setdefault(engine, [0.0, 0.0])
    if row["test"].startswith("fill"):
        cell[0] = row["tps"]
    elif row["test"].startswith("tg"):
        cell[1] = row["tps"]

def span(values, fmt):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if f"{lo:.2f}" == f"{hi:.2f}" else (fmt + "–" + fmt).format(lo, hi)

print(f"## Against llama.cpp's M3: {preset}, prefill of {depth} tokens and {decode} decode steps at that depth, "
      f"{threads} threads\n")
print("Each cell: every round (`scripts/bench_peer.sh`). The ratios take llama.cpp's better flash-attention setting "
      "in the same round.\n")
print("| path | llama.cpp prefill t/s, FA off / on | ours | ours / llama.cpp | llama.cpp decode t/s, FA off / on "
      "| ours | ours / llama.cpp |")
print("|---|---|---|---|---|---|---|")
for path in paths.split():
    cells = [v for (r, p), v in sorted(runs.items()) if p == path]
    cells = [c for c in cells if {"llama_fa0", "llama_fa1", "ours"} <= c.keys()]
    if not cells:
        print(f"| {path} | no complete round | | | | | |")
        continue
    pre = lambda c, e: c[e][0]
    dec = lambda c, e: c[e][1]
    peer_pre = ", ".join(f"{pre(c, 'llama_fa0'):.1f} / {pre(c, 'llama_fa1'):.1f}" for c in cells)
    peer_dec = ", ".join(f"{dec(c, 'llama_fa0'):.1f} / {dec(c, 'llama_fa1'):.1f}" for c in cells)
    ours_pre = ", ".join(f"{pre(c, 'ours'):,.0f}" for c in cells)
    ours_dec = ", ".join(f"{dec(c, 'ours'):.1f}" for c in cells)
    x_pre = [pre(c, "ours") / max(pre(c, "llama_fa0"), pre(c, "llama_fa1")) for c in cells]
    x_dec = [dec(c, "ours") / max(dec(c, "llama_fa0"), dec(c, "llama_fa1")) for c in cells]
    print(f"| {path} | {peer_pre} | {ours_pre} | **{span(x_pre, '{:.2f}')}×** | {peer_dec} | {ours_dec} "
          f"| **{span(x_dec, '{:.2f}')}×** |")
EOF
cat "$out"
