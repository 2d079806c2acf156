"""`m3 quantize` as a user runs it: its outputs load in `m3 logits` and `m3 generate` with no conversion
step; the independent NumPy reference reads them (its own dequantization) and agrees with the engine's
logits; MXFP8 re-quantized to MXFP8 is byte-identical; its affine weights are the bytes the independent
NumPy quantizer (tests/reference/quantize_numpy.py) writes; its MXFP8 output is the NumPy quantizer's, byte for
byte; the config carries the quantization block the format's own tools write; the policy keeps the embedding, lm_head and router gates unless told
otherwise; bad flags get one error line."""
import filecmp
import json
import os
import shutil
import subprocess
import sys

import numpy as np

M3 = os.environ["M3_BIN"]
SRC = os.environ["M3_SOURCE_DIR"]
SCRATCH = os.environ["M3_SCRATCH"]
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
import m3_reference as R  # noqa: E402

os.makedirs(SCRATCH, exist_ok=True)
results = []


def run(*args, ok=True):
    r = subprocess.run([M3] + list(args), capture_output=True, text=True, timeout=600)
    if ok and r.returncode != 0:
        raise AssertionError(f"m3 {' '.join(args)} failed: {r.stderr}")
    return r


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(f"{'PASS' if cond else 'FAIL'} {name} {detail if not cond else ''}", flush=True)


def one_error_line(r, *words):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    return (r.returncode == 1 and len(lines) == 1 and lines[0].startswith("m3: error: ")
            and all(w.lower() in lines[0].lower() for w in words))


def fresh(name):
    d = os.path.join(SCRATCH, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def logits(model, ids):
    out = os.path.join(SCRATCH, os.path.basename(model) + ".npy")
    run("logits", "-m", model, "--tokens", ",".join(map(str, ids)), "--out", out, "--cache-type", "f32")
    return np.load(out).astype(np.float64)


def header(model):
    return R.read_safetensors_header(os.path.join(model, "model.safetensors"))[0]


base = fresh("base")
run("make-checkpoint", "--preset", "tiny", "--seed", "11", "--out", base)
ids = list(np.random.default_rng(4).integers(0, 500, 96))
base_logits = logits(base, ids)

outputs, drift = {}, {}
for fmt, extra in [("mxfp8", []), ("affine4", ["--tensor-format", "*.block_sparse_moe.gate.weight=affine8-g64"]),
                   ("affine8", []), ("affine4-g32", [])]:
    d = fresh("q-" + fmt)
    r = run("quantize", "-m", base, "--out", d, "--format", fmt, *extra)
    shown = {"affine4": "affine4-g64", "affine8": "affine8-g64"}.get(fmt, fmt)
    check(f"{fmt}: the report names the format", shown in r.stdout, r.stdout)
    outputs[fmt] = d
    # The engine's logits against the reference's on the same quantized file (its own dequantization).
    a = logits(d, ids)
    ref = R.M3Reference(d).forward(np.array(ids))
    rel = float(np.abs(a - ref).max() / np.abs(ref).max())
    check(f"{fmt}: engine logits match the float64 reference of the quantized checkpoint", rel < 2e-3, f"rel {rel:.3g}")
    # Quantization moves the logits (mean relative change; the ordering by precision is checked below).
    drift[fmt] = float(np.abs(a - base_logits).mean() / np.abs(base_logits).mean())
    g = run("generate", "-m", d, "-p", "hello there", "-n", "4", "--temp", "0")
    check(f"{fmt}: m3 generate runs on it", "generated 4 tokens" in g.stderr, g.stderr[-300:])
    check(f"{fmt}: the tokenizer came along", os.path.exists(os.path.join(d, "tokenizer.json")))

print("mean relative logit change vs bf16:", {k: round(v, 4) for k, v in drift.items()})
check("more bits move the logits less: affine8 < mxfp8 < affine4, and g32 < g64 at 4 bits",
      0 < drift["affine8"] < drift["mxfp8"] < drift["affine4"] and drift["affine4-g32"] < drift["affine4"], str(drift))

# The default policy: layer linears quantized; embedding, lm_head and router gates (unless told) kept.
h = header(outputs["affine4"])
P = "language_model."
check("policy: embedding kept as stored", h[P + "model.embed_tokens.weight"]["dtype"] == "BF16")
check("policy: lm_head kept as stored", h[P + "lm_head.weight"]["dtype"] == "BF16")
check("policy: the router gate took its --tensor-format", h[P + "model.layers.1.block_sparse_moe.gate.weight"]["dtype"] == "U32"
      and h[P + "model.layers.1.block_sparse_moe.gate.scales"]["shape"][1] * 64 == 128)
check("policy: attention and experts quantized", all(
    h[P + f"model.layers.1.{m}.weight"]["dtype"] == "U32"
    for m in ("self_attn.q_proj", "self_attn.index_k_proj", "block_sparse_moe.experts.3.w2")))
cfg = json.load(open(os.path.join(outputs["affine4"], "config.json")))
q = cfg.get("quantization", {})
check("config: mlx-lm's quantization block with the gate override",
      q.get("bits") == 4 and q.get("group_size") == 64 and q.get("mode") == "affine"
      and q.get(P + "model.layers.1.block_sparse_moe.gate") == {"bits": 8, "group_size": 64}
      and cfg.get("quantization_config") == q, json.dumps(q)[:300])
mx_cfg = json.load(open(os.path.join(outputs["mxfp8"], "config.json")))["quantization_config"]
check("config: the release's MXFP8 quantization_config with its ignored layers",
      mx_cfg.get("quant_method") == "mxfp8" and mx_cfg.get("weight_block_size") == [1, 32]
      and P + "lm_head" in mx_cfg.get("ignored_layers", []), json.dumps(mx_cfg)[:300])
hm = header(outputs["mxfp8"])
check("mxfp8: F8_E4M3 weights with U8 block scales",
      hm[P + "model.layers.0.mlp.down_proj.weight"]["dtype"] == "F8_E4M3"
      and hm[P + "model.layers.0.mlp.down_proj.weight_scale_inv"]["dtype"] == "U8")

# Re-quantizing MXFP8 to MXFP8 gives the same bytes (weights on the format's grid are copied).
again = fresh("q-mxfp8-again")
r = run("quantize", "-m", outputs["mxfp8"], "--out", again, "--format", "mxfp8")
check("mxfp8 -> mxfp8 is byte-identical", filecmp.cmp(os.path.join(outputs["mxfp8"], "model.safetensors"),
                                                      os.path.join(again, "model.safetensors"), shallow=False)
      and "0 linears quantized" in r.stdout, r.stdout)
# The thread count changes no byte.
one = fresh("q-mxfp8-one-thread")
run("quantize", "-m", base, "--out", one, "--format", "mxfp8", "-t", "1")
check("quantize -t 1 writes the same bytes", filecmp.cmp(os.path.join(outputs["mxfp8"], "model.safetensors"),
                                                         os.path.join(one, "model.safetensors"), shallow=False))
# Another format's checkpoint converts through its exact dequantization.
conv = fresh("q-mxfp8-to-affine8")
run("quantize", "-m", outputs["mxfp8"], "--out", conv, "--format", "affine8")
a = logits(conv, ids)
ref = R.M3Reference(conv).forward(np.array(ids))
check("mxfp8 -> affine8 loads and matches the reference", float(np.abs(a - ref).max() / np.abs(ref).max()) < 2e-3)

# The affine bytes equal the independent NumPy quantizer's (same rounding rule, its own code).
numpy_q = fresh("numpy-affine4")
subprocess.run([sys.executable, os.path.join(SRC, "tests", "reference", "quantize_numpy.py"), base, numpy_q,
                "--bits", "4", "--group-size", "64"], check=True, timeout=600)
ck_m3, ck_np = R.Checkpoint(outputs["affine4"]), R.Checkpoint(numpy_q)
same = 0
names = [n for n in ck_m3.names() if ".layers." in n and n.endswith((".weight", ".scales", ".biases"))
         and ck_m3.dtype_of(n) != "F32" and ".gate." not in n and "norm" not in n]
for n in names:
    mm, off, dt, shp, _ = ck_m3._entries[n]
    mm2, off2, dt2, shp2, _ = ck_np._entries[n]
    nbytes = int(np.prod(shp)) * R._ST_DTYPES[dt][1]
    same += (dt == dt2 and shp == shp2 and mm[off:off + nbytes] == mm2[off2:off2 + nbytes])
check("affine4 weights are byte-identical to the NumPy quantizer's", same == len(names) and same > 50,
      f"{same} of {len(names)}")

# And the MXFP8 bytes equal the NumPy quantizer's MXFP8 (nearest E4M3, smallest fitting exponent).
numpy_mx = fresh("numpy-mxfp8")
subprocess.run([sys.executable, os.path.join(SRC, "tests", "reference", "quantize_numpy.py"), base, numpy_mx,
                "--format", "mxfp8"], check=True, timeout=600)
ck_m3, ck_np = R.Checkpoint(outputs["mxfp8"]), R.Checkpoint(numpy_mx)
same = 0
for n in ck_m3.names():
    mm, off, dt, shp, _ = ck_m3._entries[n]
    mm2, off2, dt2, shp2, _ = ck_np._entries[n]
    nbytes = int(np.prod(shp)) * R._ST_DTYPES[dt][1]
    same += (dt == dt2 and shp == shp2 and mm[off:off + nbytes] == mm2[off2:off2 + nbytes])
check("mxfp8 tensors are byte-identical to the NumPy quantizer's", same == len(ck_m3.names()) == len(ck_np.names()),
      f"{same} of {len(ck_m3.names())}")

# --keep leaves matching weights as stored.
kept = fresh("q-keep")
run("quantize", "-m", base, "--out", kept, "--format", "affine4", "--keep", "*.self_attn.index_*")
hk = header(kept)
check("--keep: the index projections stay bf16", hk[P + "model.layers.1.self_attn.index_q_proj.weight"]["dtype"] == "BF16"
      and hk[P + "model.layers.1.self_attn.q_proj.weight"]["dtype"] == "U32")

# Bad input: one line each, nothing written.
check("unknown format", one_error_line(run("quantize", "-m", base, "--out", fresh("x1"), "--format", "q3", ok=False),
                                       "--format", "q3"))
check("bad --tensor-format", one_error_line(run("quantize", "-m", base, "--out", fresh("x2"), "--format", "mxfp8",
                                                "--tensor-format", "nothing", ok=False), "PATTERN=FORMAT"))
check("output folder not empty", one_error_line(run("quantize", "-m", base, "--out", outputs["mxfp8"], "--format",
                                                    "mxfp8", ok=False), "not empty"))
check("source is not a checkpoint", one_error_line(run("quantize", "-m", fresh("nothing-here"), "--out", fresh("x3"),
                                                       "--format", "mxfp8", ok=False), "config"))
check("output == source refused", one_error_line(run("quantize", "-m", base, "--out", base, "--format", "mxfp8",
                                                     "--force", ok=False), "source"))

print(f"quantize: {sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
