#!/usr/bin/env bash
# Weight formats side by side in one run (docs/BENCHMARKS.md §0e, docs/FORMATS.md): a preset's bf16
# checkpoint and its `m3 quantize` outputs in mxfp8, affine8 and affine4; for each, decode (tg) and
# prefill (pp512) speed at depth 0, the weight bytes one decode token reads against the measured
# bandwidth, and accuracy against bf16 (`m3 perplexity --kl-base`).
# Usage: scripts/bench_formats.sh [PRESET] [OUTPUT_FILE]   (default: m3-slice, formats-PRESET.md)
#   m3-slice: M3's layer widths, 4.5 GB in bf16; about 15 minutes on 2 cores.
# Speed comes from one `m3 bench` run of every format, its repetitions alternated between them.
# Env: M3_CPU forces a CPU path; FORMATS (default "bf16 mxfp8 affine8 affine4"); REPS (default 3); TEXT (the text
# scored, default docs/ARCHITECTURE.md); CHUNKS (perplexity chunks of 512 tokens, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-m3-slice}"
out="${2:-formats-$preset.md}"
formats="${FORMATS:-bf16 mxfp8 affine8 affine4}"
text="${TEXT:-docs/ARCHITECTURE.md}"
chunks="${CHUNKS:-2}"
m3=./build/release/m3
[ -x "$m3" ] || bash scripts/build.sh release
dir="models/$preset"
[ -f "$dir/config.json" ] || $m3 make-checkpoint --preset "$preset" --seed 1 --out "$dir"
for f in $formats; do
  [ "$f" = bf16 ] && continue
  [ -f "$dir-$f/config.json" ] || $m3 quantize -m "$dir" --out "$dir-$f" --format "$f" --force
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Speed: every format in one bench run, the repetitions alternated between them.
models=()
for f in $formats; do
  d="$dir"; [ "$f" = bf16 ] || d="$dir-$f"
  models+=(-m "$d")
done
echo "== bench: $formats" >&2
$m3 bench "${models[@]}" -p 512 -n 16 -d 0 -r "${REPS:-3}" -o jsonl > "$tmp/bench.jsonl"
for f in $formats; do
  d="$dir"; [ "$f" = bf16 ] || d="$dir-$f"
  if [ "$f" != bf16 ]; then
    echo "== $f: perplexity" >&2
    $m3 perplexity -m "$d" --kl-base "$dir" -f "$text" -c 512 --chunks "$chunks" > "$tmp/$f.ppl.txt"
  fi
done
python3 - "$tmp" "$dir" "$preset" "$formats" > "$out" <<'EOF'
import json, os, re, struct, sys
tmp, base_dir, preset, formats = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()

def header(d):
    """All tensors of a checkpoint: name -> (dtype, shape, bytes)."""
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(d, f), "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        for k, v in h.items():
            if k != "__metadata__":
                out[k] = (v["dtype"], v["shape"], v["data_offsets"][1] - v["data_offsets"][0])
    return out

cfg = json.load(open(os.path.join(base_dir, "config.json")))["text_config"]
E, K = cfg.get("num_local_experts", 0), cfg.get("num_experts_per_tok", 0)

def decode_bytes(d):
    """Weight bytes one decode token reads: every linear (with its side tensors) except the routed
    experts, of which top-k of E; one embedding row."""
    total = 0
    for name, (dt, shape, nbytes) in header(d).items():
        if ".embed_tokens." in name:
            total += nbytes // shape[0]
        elif ".experts." in name:
            total += nbytes * K / E
        elif len(shape) == 2:
            total += nbytes
    return total

rows, first = [], None
all_rows = [json.loads(l) for l in open(os.path.join(tmp, "bench.jsonl")) if l.startswith("{")]
for f in formats:
    d = base_dir if f == "bf16" else f"{base_dir}-{f}"
    bench = [b for b in all_rows if b.get("model") == d]
    tg = next(b["tps"] for b in bench if b.get("test", "").startswith("tg"))
    pp = next(b["tps"] for b in bench if b.get("test", "").startswith("pp"))
    path = next(b["matmul_kernels"] for b in all_rows if "matmul_kernels" in b)
    bw = next((b["read_bandwidth_gbs"] for b in all_rows if "read_bandwidth_gbs" in b), float("nan"))
    size = sum(v[2] for v in header(d).values())
    dec = decode_bytes(d)
    ppl = {}
    if f != "bf16":
        text = open(os.path.join(tmp, f + ".ppl.txt")).read()
        for label in ("mean KL", "KL 99th percentile", "same top token", "PPL ratio"):
            m = re.search(rf"^{label}\s+([0-9.]+)", text, re.M)
            ppl[label] = float(m.group(1)) if m else float("nan")
    if first is None:
        first = (tg, pp)
    rows.append((f, size, dec, tg, pp, bw, path, ppl))

print(f"# Weight formats on the {preset} preset ({path}, {os.cpu_count()} threads)\n")
print("| format | tensor GB | weight GB read per decode token | tg16 t/s | tg × bf16 | weight GB/s | % of bandwidth "
      "| pp512 t/s | pp time × bf16 | mean KL | KL p99 | same top |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for f, size, dec, tg, pp, bw, path, ppl in rows:
    rate = dec * tg / 1e9
    kl = "— | — | —" if not ppl else f"{ppl['mean KL']:.5f} | {ppl['KL 99th percentile']:.4f} | {ppl['same top token']:.1f}%"
    print(f"| {f} | {size / 1e9:.2f} | {dec / 1e9:.3f} | {tg:.2f} | {tg / first[0]:.2f} | {rate:.1f} | "
          f"{100 * rate / bw:.0f}% of {bw:.1f} | {pp:.1f} | {first[1] / pp:.2f} | {kl} |")
EOF
echo "wrote $out" >&2
