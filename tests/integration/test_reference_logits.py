#!/usr/bin/python3
"""Engine logits vs the float64 NumPy reference (tests/reference/m3_reference.py).

For two random checkpoints written by `m3 make-checkpoint` (the tiny preset with its own small MSA
block/top-k, and the same preset with block 128 / top-16), a deterministic random token sequence
long enough that MSA is really sparse is run through the engine three ways:
  prefill       m3 logits -m DIR --tokens-file ids.txt --out a.npy
  chunk100      ... --chunk 100                      (chunk size not dividing the block size)
  decode        ... --chunk 64 --decode-from K       (prefill [0,K) in chunks, then one token at a time,
                                                      crossing a block boundary)
Each writes [T, vocab] float32 logits, compared with the reference:
  rel err = max|a - r| / max|r| over all logits, and the worst row of max_v|a-r| / max_v|r|.
Tolerance 2e-3: the engine computes in fp32 with bf16 weights (exact in both), so the only source
of difference is fp32 rounding (u = 6e-8) accumulated over a few layers and dot products of
length <= hidden/head_dim/T; the reference run in float32 lands at ~1e-6 relative on these shapes.
2e-3 leaves headroom for other summation orders and bf16-free fp32 kernels while still catching
any semantic error (wrong RoPE pair, norm, routing or block selection moves logits by >= 1e-2).
Engine modes must agree with each other within 1e-4 relative (same math, different batching).

MSA selection is discontinuous: where the 15th/16th best block scores are within fp32 noise of
each other, a correct fp32 engine may pick either. The token sequence is therefore chosen (seeded,
deterministic) so that every selection margin in the reference is >= M3_REF_TIE_MARGIN (default
2e-5, ~5x the fp32 score error measured with the reference in float32); exact ties are covered by
the reference selftest and the engine's unit tests instead.

fp8 cache (tiny16-fp8): the same with `--cache-type fp8` against cache_dtype="fp8", which rounds each
vector to E4M3 under its power-of-two scale as the cache stores it; an E4M3 step is 2^-4 relative,
so a boundary flip moves one element of one key by ~6%, still far below 2e-3 of the logits, but
in an index key it moves that block's scores by far more than the tie margin. So the token
sequence must also keep every selection when each cached element within FP8_FLIP_NEAR (1e-6,
relative) of a rounding midpoint rounds the other way (a second reference run).

bf16 cache (tiny16-bf16): the same tiny checkpoint run with `m3 logits --cache-type bf16` (prefill
and decode modes) against the reference with cache_dtype="bf16", which rounds K, V and index keys to
bf16 the way the cache stores them. Same tolerances: the rounding is modelled, so what remains is fp32
noise, plus rare elements whose fp32 value sits within that noise of a bf16 rounding boundary and so
round one bf16 step apart (a ~4e-3 relative change of one element of one key, far below 2e-3 of the
logits); the seed is picked by the bf16 reference's own selection margins.

Env: M3_BIN (m3 binary), M3_SOURCE_DIR (repo root), M3_SCRATCH (private scratch dir).
Prints a table; exits non-zero on any failure; last line "reference-logits: N passed, M failed".
"""
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("M3_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "reference"))
import m3_reference as R  # noqa: E402

REF_TOL = 2e-3        # engine vs float64 reference, relative to max|logit|
MODE_TOL = 1e-4       # engine mode vs engine mode
TIE_MARGIN = float(os.environ.get("M3_REF_TIE_MARGIN", "2e-5"))
SEED_TRIES = 6
# The fp8 cache rounds index keys to E4M3 (3 mantissa bits): an element whose fp32 value lies within
# the engine's rounding noise of a rounding midpoint may land one step (6-12%) away from the
# reference's, which moves index scores by far more than TIE_MARGIN. Token sequences whose
# selection changes when every element within FP8_FLIP_NEAR (relative) of a midpoint rounds the
# other way are skipped like near-ties; at 1e-6 about a third of the seeds qualify.
FP8_FLIP_NEAR = 1e-6
FP8_SEED_TRIES = 16
CMD_TIMEOUT = 600


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.failures = []

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(what)
            print(f"FAIL: {what}", flush=True)
        return ok


def run(cmd, what):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=CMD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"{what}: timed out after {CMD_TIMEOUT} s: {' '.join(cmd)}", 0.0
    except OSError as e:
        return False, f"{what}: cannot run {cmd[0]}: {e}", 0.0
    dt = time.time() - t0
    if p.returncode != 0:
        tail = "\n".join(p.stdout.strip().splitlines()[-15:])
        return False, f"{what}: exit {p.returncode}: {' '.join(cmd)}\n{tail}", dt
    return True, p.stdout, dt


def sequence_length(B, K):
    """Long enough that many tokens see more than K blocks; capped for test time."""
    T = min(8 * B * K, 700)
    if T <= B * (K + 2):  # large blocks (128 x top-16): 2,600 tokens = 21 blocks, > 16
        T = B * (K + 4) + B // 4 + 8
    return T


def decode_start(T, B):
    """K such that decoding tokens K..T-1 one by one crosses a block boundary."""
    boundary = ((T - 8) // B) * B
    K = max(1, boundary - min(32, max(1, B // 2)))
    if boundary <= K or boundary <= 0:
        K = max(1, T - 40)
    return K


def rel_errors(a, r):
    diff = np.abs(a - r)
    scale = max(float(np.abs(r).max()), 1e-30)
    row_scale = np.maximum(np.abs(r).max(axis=1), 1e-30)
    return float(diff.max()), float(diff.max()) / scale, float((diff.max(axis=1) / row_scale).max())


def argmax_agreement(a, r, tol):
    """(fraction of rows with equal argmax, rows that must agree but don't). A row must agree when
    the reference's top-2 gap exceeds 2*tol*max|r| (otherwise fp noise may legitimately swap them)."""
    ra, aa = r.argmax(axis=1), a.argmax(axis=1)
    top2 = np.sort(r, axis=1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 2 * tol * float(np.abs(r).max())
    bad = np.nonzero(decisive & (ra != aa))[0]
    return float((ra == aa).mean()), bad


def choose_tokens(ref, T, V, base_seed, flipped=None, tries=SEED_TRIES):
    """Deterministic random ids; the first seed whose reference selection has no near-tie. With
    `flipped` (the fp8 cache's reference with near-midpoint roundings flipped), also none that
    moves when those roundings go the other way: the engine's fp32 noise can flip them."""
    best = None
    for i in range(tries):
        seed = base_seed + i
        ids = np.random.default_rng(seed).integers(0, V, T)
        t0 = time.time()
        logits, info = ref.forward(ids, return_selection=True)
        dt = time.time() - t0
        margins = [m[np.isfinite(m)] for m in info["margin"].values()]
        mins = [float(m.min()) for m in margins if m.size]
        min_margin = min(mins) if mins else float("inf")
        near = sum(int((m < TIE_MARGIN).sum()) for m in margins)
        moved = ""
        if flipped is not None:
            _, finfo = flipped.forward(ids, return_selection=True)
            rows = sum(int((info["selection"][L] != finfo["selection"][L]).any(axis=-1).sum()) for L in info["selection"])
            moved = f", rows whose selection moves with flipped fp8 roundings {rows}"
            if rows > 0:
                min_margin = 0.0  # as ambiguous as an exact tie
        print(f"  tokens seed {seed}: reference {dt:.1f} s, min selection margin {min_margin:.3g}, "
              f"near-ties (< {TIE_MARGIN:g}) {near}{moved}", flush=True)
        cand = (min_margin, seed, ids, logits, info)
        if best is None or min_margin > best[0]:
            best = cand
        if min_margin >= TIE_MARGIN:
            return cand
    print(f"  WARNING: no seed without near-ties in {tries} tries; using seed {best[1]} "
          f"(min margin {best[0]:.3g}); a failure may be a legitimate fp32 selection flip", flush=True)
    return best


def test_model(res, table, m3, scratch, name, make_args, base_seed, cache_type="f32",
               mode_names=("prefill", "chunk100", "decode"), convert=None):
    ckpt = os.path.join(scratch, name)
    print(f"== {name} (cache {cache_type})", flush=True)
    ok, out, _ = run([m3, "make-checkpoint", *make_args, "--out", ckpt], f"{name}: make-checkpoint")
    if not res.check(ok, out if not ok else f"{name}: make-checkpoint"):
        return
    if convert is not None:  # a converter outside the engine rewrites the checkpoint
        dst = ckpt + "-converted"
        ok, out, _ = run([sys.executable, *convert, ckpt, dst], f"{name}: convert")
        if not res.check(ok, out if not ok else f"{name}: convert"):
            return
        ckpt = dst
    try:
        ref = R.M3Reference(ckpt, cache_dtype=cache_type)
    except Exception as e:  # noqa: BLE001
        res.check(False, f"{name}: reference cannot load the checkpoint: {e}")
        return
    c = ref.cfg
    sparse_layers = [L for L in range(c.num_hidden_layers) if c.is_sparse(L)]
    B, K = c.block_size, c.topk_blocks
    T = sequence_length(B, K)
    print(f"  config: hidden {c.hidden_size}, layers {c.num_hidden_layers} (MSA {sparse_layers}), heads "
          f"{c.num_attention_heads}/{c.num_key_value_heads}x{c.head_dim}, rotary {c.rotary_dim}, index "
          f"{c.num_index_heads}x{c.index_dim}, block {B}, top-k {K}, experts {c.num_local_experts}/"
          f"{c.num_experts_per_tok}, vocab {c.vocab_size}; T = {T}", flush=True)
    res.check(bool(sparse_layers), f"{name}: checkpoint has MSA layers")
    flipped = R.M3Reference(ckpt, cache_dtype="fp8", fp8_flip_near=FP8_FLIP_NEAR) if cache_type == "fp8" else None
    min_margin, seed, ids, ref_logits, info = choose_tokens(ref, T, c.vocab_size, base_seed, flipped,
                                                            FP8_SEED_TRIES if flipped else SEED_TRIES)

    # The sequence must exercise real sparsity: some token sees fewer blocks than are visible to it.
    really_sparse = False
    for L, sel in info["selection"].items():
        visible = np.arange(T) // B + 1
        if (sel.sum(axis=2) < visible[None, :]).any():
            really_sparse = True
    res.check(really_sparse, f"{name}: reference selection is sparse for some token")

    ids_path = os.path.join(scratch, f"{name}_ids.txt")
    with open(ids_path, "w") as f:
        f.write(",".join(str(int(t)) for t in ids))
    np.save(os.path.join(scratch, f"{name}_reference.npy"), ref_logits)
    dec_from = decode_start(T, B)
    modes = [("prefill", []), ("chunk100", ["--chunk", "100"]),
             ("decode", ["--chunk", "64", "--decode-from", str(dec_from)])]
    modes = [(m, extra + ["--cache-type", cache_type]) for m, extra in modes if m in mode_names]
    got = {}
    for mode, extra in modes:
        out_path = os.path.join(scratch, f"{name}_{mode}.npy")
        if os.path.exists(out_path):
            os.remove(out_path)
        ok, out, dt = run([m3, "logits", "-m", ckpt, "--tokens-file", ids_path, "--out", out_path, *extra],
                          f"{name}/{mode}: m3 logits")
        if not res.check(ok, out if not ok else f"{name}/{mode}: m3 logits"):
            continue
        try:
            a = np.load(out_path).astype(np.float64)
        except Exception as e:  # noqa: BLE001
            res.check(False, f"{name}/{mode}: cannot read {out_path}: {e}")
            continue
        if not res.check(a.shape == ref_logits.shape, f"{name}/{mode}: shape {a.shape}, want {ref_logits.shape}"):
            continue
        if not res.check(bool(np.isfinite(a).all()), f"{name}/{mode}: non-finite logits"):
            continue
        got[mode] = a
        mx, rel, row_rel = rel_errors(a, ref_logits)
        frac, bad = argmax_agreement(a, ref_logits, REF_TOL)
        row_err = np.abs(a - ref_logits).max(axis=1)
        worst = int(np.argmax(row_err))
        over = np.nonzero(row_err > REF_TOL * float(np.abs(ref_logits).max()))[0]
        where = f"worst row {worst}" + (f", first bad row {int(over[0])} (block {int(over[0]) // B})" if over.size else "")
        table.append((name, mode, mx, rel, row_rel, frac, dt))
        res.check(rel <= REF_TOL, f"{name}/{mode}: rel err {rel:.3e} > {REF_TOL:g} ({where})")
        res.check(row_rel <= REF_TOL, f"{name}/{mode}: per-row rel err {row_rel:.3e} > {REF_TOL:g} "
                                      f"({where})")
        res.check(bad.size == 0, f"{name}/{mode}: argmax differs from the reference on decisive rows "
                                 f"{bad[:10].tolist()}")
    if "prefill" in got:
        base = got["prefill"]
        for mode in ("chunk100", "decode"):
            if mode not in got:
                continue
            mx, rel, _ = rel_errors(got[mode], base)
            frac, bad = argmax_agreement(got[mode], base, MODE_TOL)
            table.append((name, f"{mode} vs prefill", mx, rel, float("nan"), frac, float("nan")))
            res.check(rel <= MODE_TOL, f"{name}: {mode} vs prefill rel {rel:.3e} > {MODE_TOL:g}")
            res.check(bad.size == 0, f"{name}: {mode} vs prefill argmax differs on rows {bad[:10].tolist()}")
    print(f"  tokens seed {seed}, min selection margin {min_margin:.3g}, decode from {dec_from}", flush=True)


def main():
    m3 = os.environ.get("M3_BIN")
    scratch = os.environ.get("M3_SCRATCH")
    if not m3 or not scratch:
        print("reference-logits: M3_BIN and M3_SCRATCH must be set (ctest sets them)")
        print("reference-logits: 0 passed, 1 failed")
        return 1
    os.makedirs(scratch, exist_ok=True)
    res = Results()
    table = []
    t0 = time.time()
    test_model(res, table, m3, scratch, "tiny16", ["--preset", "tiny", "--seed", "7"], base_seed=1000)
    test_model(res, table, m3, scratch, "tiny128",
               ["--preset", "tiny", "--seed", "8", "--block-size", "128", "--topk", "16"], base_seed=2000)
    test_model(res, table, m3, scratch, "tiny16-bf16", ["--preset", "tiny", "--seed", "7"], base_seed=1000,
               cache_type="bf16", mode_names=("prefill", "decode"))
    # The fp8 cache: K, V and index keys stored as E4M3 with a power-of-two scale per vector; the
    # reference rounds them the same way (round_to_fp8_cache), so what remains is fp32 noise.
    test_model(res, table, m3, scratch, "tiny16-fp8", ["--preset", "tiny", "--seed", "7"], base_seed=1000,
               cache_type="fp8", mode_names=("prefill", "decode"))
    # The official MXFP8 release's layout: E4M3 linears with UE8M0 block scales, dequantized by the
    # reference on its own (e4m3_to_float64), so the engine's MXFP8 path is checked against float64.
    test_model(res, table, m3, scratch, "tiny16-mxfp8", ["--preset", "tiny", "--seed", "7", "--weights", "mxfp8"],
               base_seed=1000, mode_names=("prefill", "decode"))
    # The same layout written by the NumPy quantizer in tests/reference (not the engine's code).
    quantizer = os.path.join(SOURCE_DIR, "tests", "reference", "quantize_numpy.py")
    test_model(res, table, m3, scratch, "tiny16-mxfp8-np", ["--preset", "tiny", "--seed", "7"], base_seed=1000,
               mode_names=("prefill", "decode"), convert=[quantizer, "--format", "mxfp8"])
    # mlx-lm's affine layout, written by the NumPy quantizer in tests/reference (not the engine's
    # code): 4-bit groups of 64, the embedding 8-bit in groups of 32 and one router gate 8-bit in
    # groups of 64 as per-module overrides. The reference dequantizes the packed words itself.
    test_model(res, table, m3, scratch, "tiny16-affine", ["--preset", "tiny", "--seed", "7"], base_seed=1000,
               mode_names=("prefill", "decode"),
               convert=[quantizer, "--bits", "4", "--group-size", "64",
                        "--override", "language_model.model.embed_tokens=8:32",
                        "--override", "language_model.model.layers.2.block_sparse_moe.gate=8:64"])
    print()
    print(f"{'model':<15} {'mode':<18} {'max abs err':>12} {'rel err':>10} {'row rel':>10} {'argmax':>8} {'time s':>7}")
    for name, mode, mx, rel, row_rel, frac, dt in table:
        print(f"{name:<15} {mode:<18} {mx:12.3e} {rel:10.3e} {row_rel:10.3e} {frac:8.2%} {dt:7.1f}")
    print(f"(tolerances: vs reference {REF_TOL:g} relative; between modes {MODE_TOL:g}; total {time.time() - t0:.0f} s)")
    if res.failures:
        print("failures:")
        for f in res.failures:
            print("  " + f.splitlines()[0])
    print(f"reference-logits: {res.passed} passed, {res.failed} failed")
    return 0 if res.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
