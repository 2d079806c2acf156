#!/usr/bin/python3
"""Self-test of the float64 M3 reference (m3_reference.py) on hand-built cases whose answers are
known independently: closed-form values, brute-force scalar loops, and model-level identities
(MSA with top-k >= #blocks is dense attention; a token-by-token KV-cache forward equals the
full-sequence forward; sharded == single-file checkpoints).

Run: /usr/bin/python3 tests/reference/selftest.py     (exits non-zero on failure)
Also importable: write_safetensors() and make_random_checkpoint() build tiny checkpoints.
"""
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import m3_reference as R  # noqa: E402

# --------------------------------------------------------------------------------------------
# Writing checkpoints (own safetensors writer)
# --------------------------------------------------------------------------------------------


def float_to_bf16_bits(x):
    """float32 -> bf16 bit patterns, round to nearest even (finite inputs)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: {name: (dtype str 'BF16'|'F16'|'F32'|'F64', array)}; written in sorted name order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        arr = np.asarray(arr)
        if dt == "BF16":
            raw = float_to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            raw = arr.astype({"F16": "<f2", "F32": "<f4", "F64": "<f8"}[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


TINY_TEXT = dict(
    hidden_size=64, intermediate_size=32, dense_intermediate_size=96, shared_intermediate_size=32,
    n_shared_experts=1, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    vocab_size=97, max_position_embeddings=4096, rms_norm_eps=1e-6, use_gemma_norm=True,
    attention_output_gate=False, rope_theta=10000.0, rotary_dim=8, partial_rotary_factor=0.5,
    hidden_act="swigluoai", swiglu_alpha=1.702, swiglu_limit=7.0, use_qk_norm=True, qk_norm_type="per_head",
    tie_word_embeddings=False, num_local_experts=6, num_experts_per_tok=2, scoring_func="sigmoid",
    use_routing_bias=True, routed_scaling_factor=2.0, moe_layer_freq=[0, 1, 1],
    sparse_attention_config=dict(use_sparse_attention=True, sparse_index_dim=16, sparse_num_index_heads=2,
                                 sparse_topk_blocks=3, sparse_block_size=8, sparse_score_type="max",
                                 sparse_init_block=0, sparse_local_block=1, sparse_attention_freq=[0, 1, 1],
                                 sparse_disable_index_value=[0, 1, 1]),
)


def make_random_checkpoint(out_dir, text=None, seed=0, shards=1, dtype="BF16", weight_gain=1.0):
    """Writes config.json + safetensors of a random M3-shaped text model; returns out_dir."""
    t = json.loads(json.dumps(text or TINY_TEXT))
    rng = np.random.default_rng(seed)
    Hd, nL = t["hidden_size"], t["num_hidden_layers"]
    H, KV, D = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    sa = t["sparse_attention_config"]
    G, Di = sa["sparse_num_index_heads"], sa["sparse_index_dim"]
    E = t["num_local_experts"]
    P = "language_model."
    W = {}

    def lin(name, out, inp):
        W[name] = (dtype, rng.standard_normal((out, inp)) * (weight_gain / math.sqrt(inp)))

    def norm(name, n):
        W[name] = (dtype, rng.standard_normal(n) * 0.2)

    W[P + "model.embed_tokens.weight"] = (dtype, rng.standard_normal((t["vocab_size"], Hd)))
    lin(P + "lm_head.weight", t["vocab_size"], Hd)
    norm(P + "model.norm.weight", Hd)
    for L in range(nL):
        p = f"{P}model.layers.{L}."
        norm(p + "input_layernorm.weight", Hd)
        norm(p + "post_attention_layernorm.weight", Hd)
        lin(p + "self_attn.q_proj.weight", H * D, Hd)
        lin(p + "self_attn.k_proj.weight", KV * D, Hd)
        lin(p + "self_attn.v_proj.weight", KV * D, Hd)
        lin(p + "self_attn.o_proj.weight", Hd, H * D)
        norm(p + "self_attn.q_norm.weight", D)
        norm(p + "self_attn.k_norm.weight", D)
        if sa["sparse_attention_freq"][L]:
            lin(p + "self_attn.index_q_proj.weight", G * Di, Hd)
            lin(p + "self_attn.index_k_proj.weight", Di, Hd)
            norm(p + "self_attn.index_q_norm.weight", Di)
            norm(p + "self_attn.index_k_norm.weight", Di)
        if t["moe_layer_freq"][L]:
            m = p + "block_sparse_moe."
            W[m + "gate.weight"] = ("F32", rng.standard_normal((E, Hd)) / math.sqrt(Hd))
            W[m + "e_score_correction_bias"] = ("F32", rng.standard_normal(E) * 0.1)
            I = t["intermediate_size"]
            for e in range(E):
                lin(m + f"experts.{e}.w1.weight", I, Hd)
                lin(m + f"experts.{e}.w3.weight", I, Hd)
                lin(m + f"experts.{e}.w2.weight", Hd, I)
            S = t["shared_intermediate_size"]
            lin(m + "shared_experts.gate_proj.weight", S, Hd)
            lin(m + "shared_experts.up_proj.weight", S, Hd)
            lin(m + "shared_experts.down_proj.weight", Hd, S)
        else:
            I = t["dense_intermediate_size"]
            lin(p + "mlp.gate_proj.weight", I, Hd)
            lin(p + "mlp.up_proj.weight", I, Hd)
            lin(p + "mlp.down_proj.weight", Hd, I)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump({"architectures": ["MiniMaxM3SparseForConditionalGeneration"], "model_type": "minimax_m3_vl",
                   "text_config": t}, f, indent=1)
    names = sorted(W)
    if shards == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), W)
    else:
        wmap = {}
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: W[n] for n in names[s::shards]}
            write_safetensors(os.path.join(out_dir, fname), part)
            wmap.update({n: fname for n in part})
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wmap}, f)
    return out_dir


# --------------------------------------------------------------------------------------------
# Independent scalar versions (loops, one token at a time)
# --------------------------------------------------------------------------------------------


def select_blocks_loop(iq, ik, B, topk):
    """Per-token, per-group selection written as plain loops. Returns list[g][p] = sorted block ids."""
    T, G, D = iq.shape
    out = [[None] * T for _ in range(G)]
    for g in range(G):
        for p in range(T):
            L = p // B
            if L + 1 <= topk:
                out[g][p] = list(range(L + 1))
                continue
            scores = []
            for b in range(L):  # blocks before the local one are fully visible
                best = -math.inf
                for t in range(b * B, b * B + B):
                    best = max(best, float(np.dot(iq[p, g], ik[t])) / math.sqrt(D))
                scores.append((-best, b))
            scores.sort()
            out[g][p] = sorted([b for _, b in scores[:topk - 1]] + [L])
    return out


def attention_loop(q, k, v, allowed=None):
    """allowed(g, p, t) -> bool extra mask. Scalar softmax attention, causal, GQA."""
    T, H, D = q.shape
    KV = k.shape[1]
    out = np.zeros((T, H, v.shape[2]))
    for h in range(H):
        g = h // (H // KV)
        for p in range(T):
            ts = [t for t in range(p + 1) if allowed is None or allowed(g, p, t)]
            s = np.array([np.dot(q[p, h], k[t, g]) / math.sqrt(D) for t in ts])
            w = np.exp(s - s.max())
            w /= w.sum()
            out[p, h] = sum(wi * v[t, g] for wi, t in zip(w, ts))
    return out


def incremental_forward(model_dir):
    """Token-by-token forward with K/V and index-K caches, written separately from M3Reference
    (scalar loops for routing, selection and attention). Returns a function tokens -> logits."""
    ck = R.Checkpoint(model_dir)
    c = R.TextConfig(ck.config)

    def w(n):
        return ck.get("language_model." + n)

    def gn(x, wt):
        return x / math.sqrt(float(np.mean(x * x)) + c.rms_norm_eps) * (1.0 + wt)

    def rope(vec, p):
        r, half = c.rotary_dim, c.rotary_dim // 2
        out = vec.copy()
        for j in range(half):
            a = p * c.rope_theta ** (-2.0 * j / r)
            x0, x1 = vec[j], vec[j + half]
            out[j] = x0 * math.cos(a) - x1 * math.sin(a)
            out[j + half] = x1 * math.cos(a) + x0 * math.sin(a)
        return out

    def act(g, u):
        out = np.empty_like(g)
        for i in range(g.size):
            gi = min(g[i], c.swiglu_limit)
            ui = min(max(u[i], -c.swiglu_limit), c.swiglu_limit)
            out[i] = gi / (1.0 + math.exp(-c.swiglu_alpha * gi)) * (ui + 1.0)
        return out

    def ffn(x, pre, gname, uname, dname):
        return w(pre + dname) @ act(w(pre + gname) @ x, w(pre + uname) @ x)

    def run(tokens):
        H, KV, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        hpg = H // KV
        kc = [[] for _ in range(c.num_hidden_layers)]
        vc = [[] for _ in range(c.num_hidden_layers)]
        ikc = [[] for _ in range(c.num_hidden_layers)]
        logits = []
        for p, tok in enumerate(tokens):
            x = w("model.embed_tokens.weight")[tok].copy()
            for L in range(c.num_hidden_layers):
                pre = f"model.layers.{L}."
                a = pre + "self_attn."
                h = gn(x, w(pre + "input_layernorm.weight"))
                q = (w(a + "q_proj.weight") @ h).reshape(H, D)
                k = (w(a + "k_proj.weight") @ h).reshape(KV, D)
                v = (w(a + "v_proj.weight") @ h).reshape(KV, D)
                q = np.array([rope(gn(q[i], w(a + "q_norm.weight")), p) for i in range(H)])
                k = np.array([rope(gn(k[i], w(a + "k_norm.weight")), p) for i in range(KV)])
                kc[L].append(k)
                vc[L].append(v)
                allowed_blocks = [set(range(p // c.block_size + 1)) for _ in range(KV)]
                if c.is_sparse(L):
                    Gi, Di = c.num_index_heads, c.index_dim
                    iq = (w(a + "index_q_proj.weight") @ h).reshape(Gi, Di)
                    iq = [rope(gn(iq[g], w(a + "index_q_norm.weight")), p) for g in range(Gi)]
                    ik = rope(gn(w(a + "index_k_proj.weight") @ h, w(a + "index_k_norm.weight")), p)
                    ikc[L].append(ik)
                    Lb = p // c.block_size
                    for g in range(Gi):
                        if Lb + 1 > c.topk_blocks:
                            best = {}
                            for t in range(Lb * c.block_size):
                                s = float(np.dot(iq[g], ikc[L][t])) / math.sqrt(Di)
                                b = t // c.block_size
                                best[b] = max(best.get(b, -math.inf), s)
                            ranked = sorted(best, key=lambda b: (-best[b], b))
                            allowed_blocks[g] = set(ranked[:c.topk_blocks - 1]) | {Lb}
                o = np.zeros((H, D))
                for hh in range(H):
                    g = hh // hpg
                    ts = [t for t in range(p + 1) if t // c.block_size in allowed_blocks[g]]
                    s = np.array([np.dot(q[hh], kc[L][t][g]) / math.sqrt(D) for t in ts])
                    e = np.exp(s - s.max())
                    e /= e.sum()
                    o[hh] = sum(ei * vc[L][t][g] for ei, t in zip(e, ts))
                x = x + w(a + "o_proj.weight") @ o.reshape(-1)
                h = gn(x, w(pre + "post_attention_layernorm.weight"))
                if c.is_moe(L):
                    m = pre + "block_sparse_moe."
                    r = w(m + "gate.weight") @ h
                    s = [1.0 / (1.0 + math.exp(-ri)) for ri in r]
                    bias = w(m + "e_score_correction_bias")
                    order = sorted(range(len(s)), key=lambda e: (-(s[e] + bias[e]), e))[:c.num_experts_per_tok]
                    tot = sum(s[e] for e in order)
                    y = ffn(h, m + "shared_experts.", "gate_proj.weight", "up_proj.weight", "down_proj.weight")
                    for e in order:
                        y = y + (s[e] / tot * c.routed_scaling_factor) * ffn(
                            h, m + f"experts.{e}.", "w1.weight", "w3.weight", "w2.weight")
                else:
                    y = ffn(h, pre + "mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight")
                x = x + y
            y = gn(x, w("model.norm.weight"))
            logits.append(w("lm_head.weight") @ y)
        return np.array(logits)

    return run


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def close(a, b, tol, what):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise AssertionError(f"{what}: shape {a.shape} vs {b.shape}")
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    if not err <= tol:
        raise AssertionError(f"{what}: max abs err {err:.3e} > {tol:.1e}")


@test
def bf16_conversion_is_exact():
    bits = np.array([0x3F80, 0xC000, 0x3F81, 0x0000, 0x8000, 0x7F80, 0x0001, 0x4049], dtype=np.uint16)
    want = [1.0, -2.0, 1.0 + 2.0 ** -7, 0.0, -0.0, math.inf, 2.0 ** -133, 3.140625]
    got = R.bf16_to_float32(bits).astype(np.float64)
    assert list(got) == want, got
    assert math.copysign(1.0, got[4]) < 0
    # writer round-trip, and round-to-nearest-even in the writer
    x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -3.5], dtype=np.float32)
    assert list(R.bf16_to_float32(float_to_bf16_bits(x))) == [1.0, 1.0, 1.0 + 2 * 2.0 ** -7 * 1.0, -3.5]


@test
def bf16_cache_rounding():
    """round_to_bf16 (the reference's bf16 KV cache): nearest even via fp32, NaN stays NaN, and
    cache_dtype="bf16" really changes attention (K, V, index keys are rounded)."""
    x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, -2.5e-3, 0.0, math.inf])
    got = R.round_to_bf16(x)
    assert got.dtype == np.float64
    want = [1.0, 1.0, 1.0 + 2.0 ** -6, 1.0 + 2.0 ** -7, float(R.bf16_to_float32(float_to_bf16_bits(np.array([-2.5e-3])))[0]), 0.0, math.inf]
    assert list(got) == want, got
    assert np.isnan(R.round_to_bf16(np.array([np.nan])))[0]
    y = np.random.default_rng(3).standard_normal(1000)
    r = R.round_to_bf16(y)
    assert (R.round_to_bf16(r) == r).all()  # idempotent
    assert np.abs(r - y).max() <= 2.0 ** -8 * np.abs(y).max()
    try:
        R.M3Reference.__init__(object.__new__(R.M3Reference), "/nonexistent", cache_dtype="f16")
        raise AssertionError("cache_dtype f16 accepted")
    except ValueError:
        pass


@test
def e4m3_rounding_and_its_flip():
    """round_to_e4m3: nearest (ties to even) on the 3-bit-mantissa grid; with flip_near, values within
    that relative distance of a midpoint take the other neighbour and every other value is unchanged."""
    # 1.0625 is the midpoint of 1.0 and 1.125 (ties to even: 1.0); 1.0625 + 2^-30 lies 2^-27 (relative
    # ~1e-8) above it; 1.07 is far from any midpoint; 2^-9 is the smallest subnormal.
    x = np.array([1.0625, 1.0625 + 2.0 ** -30, 1.07, -1.0625 + 2.0 ** -30, 3 * 2.0 ** -10, 500.0])
    assert list(R.round_to_e4m3(x)) == [1.0, 1.125, 1.125, -1.0, 2.0 ** -8, 448.0], R.round_to_e4m3(x)
    flipped = R.round_to_e4m3(x, flip_near=1e-6)
    assert list(flipped) == [1.125, 1.0, 1.125, -1.125, 2.0 ** -9, 448.0], flipped
    y = np.random.default_rng(5).standard_normal(10000)
    a, b = R.round_to_e4m3(y), R.round_to_e4m3(y, flip_near=1e-6)
    moved = a != b
    q = np.abs(y) / 2.0 ** (np.maximum(np.floor(np.log2(np.abs(y))), -6.0) - 3)
    assert (np.abs(q[moved] - np.floor(q[moved]) - 0.5) <= 1e-6 * q[moved]).all()  # only near-midpoint values move


@test
def rms_norm_known_values():
    x = np.array([[3.0, 4.0]])
    y = R.rms_norm(x, np.array([0.0, 1.0]), eps=0.0)
    r = math.sqrt(12.5)
    close(y, [[3 / r, 8 / r]], 1e-15, "gemma rmsnorm")
    y = R.rms_norm(x, np.array([0.5, 2.0]), eps=0.0, gemma=False)
    close(y, [[1.5 / r, 8 / r]], 1e-15, "plain rmsnorm")
    y = R.rms_norm(np.zeros((1, 4)), np.zeros(4), eps=1e-6)
    close(y, np.zeros((1, 4)), 0, "zeros with eps")


@test
def rope_rotates_known_vectors():
    D, rot, theta = 8, 4, 100.0
    p = 3
    # dims 0 and 2 are a pair (freq 1), dims 1 and 3 a pair (freq 100^(-1/2) = 0.1)
    x = np.zeros((1, 2, D))
    x[0, 0, 0] = 1.0
    x[0, 1, 3] = 1.0
    x[0, :, 4:] = [5.0, 6.0, 7.0, 8.0]
    y = R.rope_neox_partial(x, np.array([p]), rot, theta)
    want0 = np.array([math.cos(3.0), 0, math.sin(3.0), 0, 5, 6, 7, 8])
    want1 = np.array([0, -math.sin(0.3), 0, math.cos(0.3), 5, 6, 7, 8])
    close(y[0, 0], want0, 1e-15, "rope head 0")
    close(y[0, 1], want1, 1e-15, "rope head 1")
    close(R.rope_neox_partial(x, np.array([0]), rot, theta), x, 0, "rope at position 0 is identity")
    # scores depend only on relative position
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((1, 1, D)), rng.standard_normal((1, 1, D))
    d1 = np.dot(R.rope_neox_partial(q, [17], rot, theta).ravel(), R.rope_neox_partial(k, [5], rot, theta).ravel())
    d2 = np.dot(R.rope_neox_partial(q, [112], rot, theta).ravel(), R.rope_neox_partial(k, [100], rot, theta).ravel())
    assert abs(d1 - d2) < 1e-12, (d1, d2)


@test
def swigluoai_clamps():
    def ref(g, u):
        g2 = min(g, 7.0)
        u2 = min(max(u, -7.0), 7.0)
        return g2 * (1.0 / (1.0 + math.exp(-1.702 * g2))) * (u2 + 1.0)
    g = np.array([10.0, 10.0, -10.0, 0.5, 7.0, -30.0, 3.0])
    u = np.array([-10.0, 10.0, 2.0, -0.25, 7.5, 20.0, -8.0])
    got = R.swigluoai(g, u)
    close(got, [ref(a, b) for a, b in zip(g, u)], 1e-14, "swigluoai")
    # g=10 clamps to 7; u=-10 clamps to -7 -> 7*sigmoid(11.914)*(-6); negative gate is not clamped
    close(got[0], 7.0 / (1.0 + math.exp(-11.914)) * -6.0, 1e-13, "upper gate clamp")
    close(got[2], -10.0 / (1.0 + math.exp(17.02)) * 3.0, 1e-20, "no lower gate clamp")
    close(R.swigluoai(np.array([2.0]), np.array([1.0]), alpha=1.0, limit=1.5),
          [1.5 / (1.0 + math.exp(-1.5)) * 2.0], 1e-15, "config alpha/limit")


@test
def selection_tie_rule_all_zero():
    T, B, K = 2304, 128, 16
    sel, margin = R.msa_select_blocks(np.zeros((T, 2, 64)), np.zeros((T, 64)), B, K)
    got = list(np.nonzero(sel[0, 2303])[0])
    assert got == list(range(15)) + [17], got
    assert (sel[0] == sel[1]).all()
    assert margin[0, 2303] == 0.0
    # p = 2047: 16 visible blocks -> all of them
    assert list(np.nonzero(sel[0, 2047])[0]) == list(range(16))
    # p = 2048: 17 visible blocks -> 0..14 + 16
    assert list(np.nonzero(sel[0, 2048])[0]) == list(range(15)) + [16]


@test
def selection_dense_when_few_blocks():
    rng = np.random.default_rng(2)
    T, B, K, G, D = 96, 8, 12, 3, 16  # 12 blocks <= topk
    iq, ik = rng.standard_normal((T, G, D)), rng.standard_normal((T, D))
    sel, margin = R.msa_select_blocks(iq, ik, B, K)
    for p in range(T):
        assert list(np.nonzero(sel[0, p])[0]) == list(range(p // B + 1))
    assert sel.sum(axis=0).min() >= 0 and np.isinf(margin).all()
    q, k, v = rng.standard_normal((T, 6, D)), rng.standard_normal((T, G, D)), rng.standard_normal((T, G, 5))
    close(R.attention(q, k, v, sel, B), R.attention(q, k, v), 1e-14, "selection-masked == dense")


@test
def selection_matches_loop():
    rng = np.random.default_rng(3)
    old = R.SELECT_CHUNK
    R.SELECT_CHUNK = 13  # odd chunking, not aligned with blocks
    try:
        for T, B, K in [(61, 4, 3), (50, 5, 1), (40, 3, 6)]:
            G, D = 2, 8
            iq, ik = rng.standard_normal((T, G, D)), rng.standard_normal((T, D))
            # inject exact ties: duplicate some keys so different blocks have equal maxima
            ik[B:2 * B] = ik[:B]
            sel, margin = R.msa_select_blocks(iq, ik, B, K)
            want = select_blocks_loop(iq, ik, B, K)
            for g in range(G):
                for p in range(T):
                    got = list(np.nonzero(sel[g, p])[0])
                    assert got == want[g][p], (T, B, K, g, p, got, want[g][p])
            assert (sel.sum(axis=2) <= K).all()
            assert sel.sum(axis=2).min() >= 1
    finally:
        R.SELECT_CHUNK = old


@test
def attention_matches_loop():
    rng = np.random.default_rng(4)
    T, H, KV, D, B, K = 37, 6, 3, 8, 4, 3
    q, k, v = rng.standard_normal((T, H, D)), rng.standard_normal((T, KV, D)), rng.standard_normal((T, KV, 7))
    old = R.ATTN_CHUNK
    R.ATTN_CHUNK = 10
    try:
        close(R.attention(q, k, v), attention_loop(q, k, v), 1e-13, "dense GQA attention")
        iq, ik = rng.standard_normal((T, KV, D)), rng.standard_normal((T, D))
        sel, _ = R.msa_select_blocks(iq, ik, B, K)
        got = R.attention(q, k, v, sel, B)
        want = attention_loop(q, k, v, lambda g, p, t: sel[g, p, t // B])
        close(got, want, 1e-13, "sparse GQA attention")
        assert np.max(np.abs(got - R.attention(q, k, v))) > 1e-3, "sparse should differ from dense here"
    finally:
        R.ATTN_CHUNK = old


@test
def moe_routing_bias_selects_but_does_not_weight():
    logits = np.array([[2.0, 1.0, 0.0, -1.0]])
    s = 1.0 / (1.0 + np.exp(-logits[0]))
    e, w = R.moe_route(logits, np.zeros(4), 2, 2.0)
    assert list(e[0]) == [0, 1]
    close(w[0], [2 * s[0] / (s[0] + s[1]), 2 * s[1] / (s[0] + s[1])], 1e-15, "weights no bias")
    bias = np.array([0.0, 0.0, 0.0, 1.0])  # lifts expert 3 into the top 2
    e, w = R.moe_route(logits, bias, 2, 2.0)
    assert list(e[0]) == [3, 0], e
    close(w[0], [2 * s[3] / (s[3] + s[0]), 2 * s[0] / (s[3] + s[0])], 1e-15, "weights use s, not s+bias")
    # ties in s+bias -> smaller expert id
    e, _ = R.moe_route(np.zeros((1, 5)), np.array([0.0, 0.5, 0.0, 0.5, 0.5]), 2, 1.0)
    assert list(e[0]) == [1, 3], e
    e, _ = R.moe_route(np.zeros((1, 5)), None, 3, 1.0)
    assert list(e[0]) == [0, 1, 2], e


def _with_sparse(cfg_text, **sa):
    t = json.loads(json.dumps(cfg_text))
    t["sparse_attention_config"].update(sa)
    return t


@test
def checkpoint_msa_with_large_topk_equals_dense():
    tmp = tempfile.mkdtemp(prefix="m3ref_")
    try:
        T = 70  # 9 blocks of 8
        tokens = np.random.default_rng(5).integers(0, TINY_TEXT["vocab_size"], T)
        big = make_random_checkpoint(os.path.join(tmp, "big"), _with_sparse(TINY_TEXT, sparse_topk_blocks=9), seed=11)
        dense = make_random_checkpoint(os.path.join(tmp, "dense"),
                                       _with_sparse(TINY_TEXT, use_sparse_attention=False), seed=11)
        small = make_random_checkpoint(os.path.join(tmp, "small"), TINY_TEXT, seed=11)
        lb, info = R.M3Reference(big).forward(tokens, return_selection=True)
        ld = R.M3Reference(dense).forward(tokens)
        ls, info_s = R.M3Reference(small).forward(tokens, return_selection=True)
        close(lb, ld, 1e-12, "MSA with topk >= #blocks vs dense")
        assert sorted(info["selection"]) == [1, 2]
        assert all(s.sum(axis=2).max() == 9 for s in info["selection"].values())
        # top-3 of 9 blocks: really sparse, and the logits change
        assert info_s["selection"][1].sum(axis=2).max() == 3
        assert np.max(np.abs(ls - ld)) > 1e-3
        assert np.isfinite(lb).all() and lb.shape == (T, TINY_TEXT["vocab_size"])
    finally:
        shutil.rmtree(tmp)


@test
def checkpoint_incremental_equals_full_sequence():
    """Full-sequence vectorised forward (with small chunks) == token-by-token scalar forward."""
    tmp = tempfile.mkdtemp(prefix="m3ref_")
    old = (R.SELECT_CHUNK, R.ATTN_CHUNK)
    R.SELECT_CHUNK, R.ATTN_CHUNK = 23, 17
    try:
        d = make_random_checkpoint(tmp, TINY_TEXT, seed=12, weight_gain=3.0)  # gain: swiglu clamps engage
        T = 45
        tokens = np.random.default_rng(6).integers(0, TINY_TEXT["vocab_size"], T)
        full = R.M3Reference(d).forward(tokens)
        inc = incremental_forward(d)(list(tokens))
        close(full, inc, 1e-10 * max(1.0, np.abs(inc).max()), "full vs incremental logits")
    finally:
        R.SELECT_CHUNK, R.ATTN_CHUNK = old
        shutil.rmtree(tmp)


@test
def checkpoint_sharded_and_dtypes():
    tmp = tempfile.mkdtemp(prefix="m3ref_")
    try:
        tokens = [1, 5, 9, 2, 96, 0, 33]
        a = make_random_checkpoint(os.path.join(tmp, "one"), TINY_TEXT, seed=13)
        b = make_random_checkpoint(os.path.join(tmp, "three"), TINY_TEXT, seed=13, shards=3)
        close(R.M3Reference(a).forward(tokens), R.M3Reference(b).forward(tokens), 0, "sharded == single file")
        ck = R.Checkpoint(a)
        assert ck.dtype_of("language_model.model.layers.1.block_sparse_moe.gate.weight") == "F32"
        assert ck.dtype_of("language_model.lm_head.weight") == "BF16"
        # F16 / F32 / F64 storage read back exactly
        vals = np.array([[1.5, -0.25], [1024.0, 3e-5]])
        write_safetensors(os.path.join(tmp, "t.safetensors"),
                          {"a": ("F16", vals), "b": ("F32", vals), "c": ("F64", vals), "d": ("BF16", vals)})
        hdr, _, _ = R.read_safetensors_header(os.path.join(tmp, "t.safetensors"))
        assert hdr["a"]["shape"] == [2, 2]
        os.makedirs(os.path.join(tmp, "t"))
        shutil.move(os.path.join(tmp, "t.safetensors"), os.path.join(tmp, "t", "model.safetensors"))
        with open(os.path.join(tmp, "t", "config.json"), "w") as f:
            f.write("{}")
        ck = R.Checkpoint(os.path.join(tmp, "t"))
        close(ck.get("a"), vals.astype(np.float16), 0, "F16")
        close(ck.get("b"), vals.astype(np.float32), 0, "F32")
        close(ck.get("c"), vals, 0, "F64")
        close(ck.get("d"), R.bf16_to_float32(float_to_bf16_bits(vals)), 0, "BF16")
        # a lying header is rejected with the file named
        with open(os.path.join(tmp, "t", "model.safetensors"), "r+b") as f:
            f.truncate(os.path.getsize(os.path.join(tmp, "t", "model.safetensors")) - 4)
        try:
            R.Checkpoint(os.path.join(tmp, "t"))
            raise AssertionError("truncated file accepted")
        except R.CheckpointError as e:
            assert "model.safetensors" in str(e), e
    finally:
        shutil.rmtree(tmp)


@test
def cli_and_float32_mode():
    tmp = tempfile.mkdtemp(prefix="m3ref_")
    try:
        d = make_random_checkpoint(os.path.join(tmp, "m"), TINY_TEXT, seed=14)
        tokens = list(np.random.default_rng(7).integers(0, TINY_TEXT["vocab_size"], 60))
        with open(os.path.join(tmp, "ids.txt"), "w") as f:
            f.write(",".join(map(str, tokens)) + "\n")
        out, sel = os.path.join(tmp, "l.npy"), os.path.join(tmp, "s.npz")
        assert R.main(["--model", d, "--tokens-file", os.path.join(tmp, "ids.txt"), "--out", out,
                       "--selection-out", sel]) == 0
        want, info = R.M3Reference(d).forward(tokens, return_selection=True)
        close(np.load(out), want, 0, "CLI logits")
        z = np.load(sel)
        assert sorted(z.files) == ["layer1_margin", "layer1_selection", "layer2_margin", "layer2_selection"]
        assert (z["layer2_selection"] == info["selection"][2]).all()
        assert R.main(["--model", d, "--tokens", ",".join(map(str, tokens[:5])), "--out", out]) == 0
        close(np.load(out), want[:5], 1e-12, "prefix logits (causality)")
        f32 = R.M3Reference(d, dtype=np.float32).forward(tokens)
        assert f32.dtype == np.float32
        close(f32, want, 1e-4 * np.abs(want).max(), "float32 mode near float64")
    finally:
        shutil.rmtree(tmp)


def main():
    passed = failed = 0
    for fn in TESTS:
        t0 = time.time()
        try:
            fn()
            passed += 1
            print(f"PASS {fn.__name__} ({time.time() - t0:.2f} s)")
        except Exception:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc(file=sys.stdout)
    print(f"selftest: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
