#!/usr/bin/python3
"""Float64 NumPy reference of the MiniMax-M3 text model (docs: /work/shared/M3-ARCHITECTURE.md §1-§4).

Written from the spec, independently of the C++ engine, to be the oracle the engine's logits are
measured against. Only NumPy and the standard library.

What it computes, for a token sequence at positions 0..T-1 (full causal sequence, no cache):
  x = E[tokens]
  per layer:  h = GN(x; input_layernorm);  x += Attn(h)   (dense, or MSA on sparse layers)
              h = GN(x; post_attention_layernorm);  x += FFN(h)   (dense MLP, or MoE)
  logits = GN(x; norm) . lm_head^T
GN is the Gemma RMSNorm x * (mean(x^2) + eps)^-1/2 * (1 + w). Weights are read in their stored dtype
(BF16/F16/F32/F64) and converted exactly; all math is float64 unless dtype=np.float32 is asked for
(used only to estimate how far an fp32 engine can be from exact math).
cache_dtype="bf16" models a bf16 KV cache (spec §2.6, the engine's --cache-type bf16): K (after norm
and RoPE), V and the index keys are rounded to bf16 (nearest even, via fp32 as the engine stores
fp32 values) before attention and block selection read them; everything else stays float64.
cache_dtype="fp8" models the engine's fp8 cache the same way: each token's key and value per KV head
and its index key become E4M3 times a power-of-two scale per vector (round_to_fp8_cache).

Command line:
  /usr/bin/python3 tests/reference/m3_reference.py --model DIR (--tokens 1,2,3 | --tokens-file F)
      --out logits.npy [--selection-out sel.npz] [--dtype float64|float32] [--cache-dtype f32|bf16|fp8]
  /usr/bin/python3 tests/reference/m3_reference.py --model DIR --tokens ... --losses [--indexer-warmup]
      prints the training losses of `m3 grad` (training_losses: cross-entropy and the indexer KL)
"""
import argparse
import json
import math
import mmap
import os
import sys
import time

import numpy as np

PREFIX = "language_model."

# --------------------------------------------------------------------------------------------
# Checkpoint reading (safetensors, single file or sharded)
# --------------------------------------------------------------------------------------------

_ST_DTYPES = {
    "BF16": (np.uint16, 2),  # converted by bf16_to_float32
    "F16": (np.float16, 2),
    "F32": (np.float32, 4),
    "F64": (np.float64, 8),
    "F8_E4M3": (np.uint8, 1),  # converted by e4m3_to_float64 (and the MXFP8 block scale)
    "U8": (np.uint8, 1),       # MXFP8 scales (UE8M0)
    "U32": (np.uint32, 4),     # mlx-lm's affine layout: packed 4- or 8-bit values
}


def e4m3_to_float64(raw_u8):
    """OCP FP8 E4M3 (float8_e4m3fn) bytes -> float64, exactly: sign, 4 exponent bits (bias 7),
    3 mantissa bits; exponent 0 is subnormal (m/8 * 2^-6); 0x7f/0xff are NaN; no infinities."""
    b = np.asarray(raw_u8, dtype=np.uint8).astype(np.int64)
    sign = np.where(b >> 7, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 0x7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * 2.0 ** (e - 7.0))
    return np.where((e == 15) & (m == 7), np.nan, sign * mag)


class CheckpointError(Exception):
    pass


def bf16_to_float32(raw_u16):
    """bf16 bit patterns (uint16) -> float32, exactly: the bf16 bits are the top half of an fp32."""
    return (np.asarray(raw_u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(x):
    """Round to bf16 (nearest even) and back, as the engine's bf16 cache stores a value: the value is
    first an fp32 (the engine computes K/V in fp32), then its low 16 bits are rounded away."""
    x = np.asarray(x)
    f = x.astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    out = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    out = np.where(np.isnan(f), f, out)  # NaN stays NaN
    return out.astype(x.dtype)


def round_to_e4m3(x, flip_near=0.0):
    """Round to the nearest OCP E4M3 value (ties to even), saturating at +-448: 3 mantissa bits, the
    smallest normal 2^-6, subnormal steps of 2^-9. x is float64 (exact for the float32 inputs).
    flip_near > 0: values within flip_near (relative) of a rounding midpoint go to the other
    neighbour, the rounding a slightly different fp32 input would get (see M3Reference)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(e, -6.0)  # below 2^-6 the steps are those of the subnormals
    step = 2.0 ** (e - 3)
    q = a / step
    n = np.rint(q)  # np.rint rounds half to even
    if flip_near > 0:
        lo = np.floor(q)
        near = np.abs(q - lo - 0.5) <= flip_near * q
        n = np.where(near, np.where(n == lo, lo + 1, lo), n)
    return np.sign(x) * np.minimum(n * step, 448.0)


def round_to_fp8_cache(x, flip_near=0.0):
    """What the engine's fp8 cache stores for each vector along the last axis (one token's key,
    value or index key of one head): the vector (first an fp32, as the engine computes it) over its
    power-of-two scale 2^e, the smallest with max|x| / 2^e <= 448 (e in [-126, 119]), rounded to
    E4M3, times 2^e. flip_near: as for round_to_e4m3."""
    f = np.asarray(x).astype(np.float32).astype(np.float64)
    amax = np.abs(f).max(axis=-1, keepdims=True)
    e = np.where(amax > 0, np.ceil(np.log2(np.where(amax > 0, amax, 1.0) / 448.0)), 0.0)
    e = np.where(amax > 448.0 * 2.0 ** (e - 1), e, e - 1)   # log2's rounding, both ways
    e = np.where(amax > 448.0 * 2.0 ** e, e + 1, e)
    e = np.clip(e, -126, 119)
    scale = 2.0 ** e
    return (round_to_e4m3(f / scale, flip_near) * scale).astype(np.asarray(x).dtype)


def read_safetensors_header(path):
    """Returns (header dict without __metadata__, metadata dict, absolute offset of the data section)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: shorter than the 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise CheckpointError(f"{path}: header length {n} exceeds the file size {size}")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    data_start = 8 + n
    data_len = size - data_start
    for name, info in header.items():
        dt = info.get("dtype")
        if dt not in _ST_DTYPES:
            raise CheckpointError(f"{path}: tensor {name}: unsupported dtype {dt!r}")
        shape = info.get("shape")
        offs = info.get("data_offsets")
        if not isinstance(shape, list) or not isinstance(offs, list) or len(offs) != 2:
            raise CheckpointError(f"{path}: tensor {name}: bad shape or data_offsets")
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        begin, end = offs
        if not (0 <= begin <= end <= data_len):
            raise CheckpointError(f"{path}: tensor {name}: data_offsets {offs} outside data ({data_len} bytes)")
        if end - begin != numel * _ST_DTYPES[dt][1]:
            raise CheckpointError(f"{path}: tensor {name}: {end - begin} bytes but shape {shape} {dt} "
                                  f"needs {numel * _ST_DTYPES[dt][1]}")
    return header, meta, data_start


class Checkpoint:
    """Tensors of a checkpoint folder (config.json + model.safetensors or indexed shards)."""

    def __init__(self, model_dir):
        self.dir = model_dir
        cfg_path = os.path.join(model_dir, "config.json")
        with open(cfg_path, "r", encoding="utf-8") as f:
            self.config = json.load(f)
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        single_path = os.path.join(model_dir, "model.safetensors")
        if os.path.exists(index_path):
            with open(index_path, "r", encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            files = sorted(set(weight_map.values()))
        elif os.path.exists(single_path):
            weight_map = None
            files = ["model.safetensors"]
        else:
            raise CheckpointError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")
        self._entries = {}  # name -> (mmap, abs offset, dtype str, shape, file)
        self._maps = []
        for fname in files:
            path = os.path.join(model_dir, fname)
            header, _, data_start = read_safetensors_header(path)
            with open(path, "rb") as fh:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(path) else b""
            self._maps.append(mm)
            for name, info in header.items():
                if weight_map is not None and weight_map.get(name) != fname:
                    continue  # only trust the shard the index names
                self._entries[name] = (mm, data_start + info["data_offsets"][0], info["dtype"],
                                       tuple(info["shape"]), path)
        if weight_map is not None:
            missing = [n for n in weight_map if n not in self._entries]
            if missing:
                raise CheckpointError(f"{model_dir}: index names {missing[0]} but its shard lacks it")

    def has(self, name):
        return name in self._entries

    def names(self):
        return sorted(self._entries)

    def dtype_of(self, name):
        return self._entries[name][2]

    def _affine(self, name, words, path):
        """mlx-lm's affine layout: "<module>.weight" U32 [rows, cols * bits / 32] (element 0 in the
        lowest bits), "<module>.scales" and "<module>.biases" BF16 [rows, cols / group];
        W = scale * q + bias. bits and group come from config.json's "quantization" block (the
        module's entry, else the defaults), as mlx-lm reads them."""
        module = name[: -len(".weight")]
        q = self.config.get("quantization") or self.config.get("quantization_config")
        if not isinstance(q, dict) or not self.has(module + ".scales") or not self.has(module + ".biases"):
            raise CheckpointError(f"{path}: tensor {name}: U32 without a quantization config or scales/biases")
        spec = q.get(module, {})
        if spec is False:
            raise CheckpointError(f"{path}: tensor {name}: packed, but the config leaves {module} unquantized")
        bits, group = int(spec.get("bits", q["bits"])), int(spec.get("group_size", q["group_size"]))
        rows, cols = words.shape[0], words.shape[1] * 32 // bits
        scales = self.get(module + ".scales", np.float64)
        biases = self.get(module + ".biases", np.float64)
        if scales.shape != (rows, cols // group) or biases.shape != scales.shape:
            raise CheckpointError(f"{path}: tensor {name}: scales {list(scales.shape)}, expected "
                                  f"[{rows}, {cols // group}] for {bits}-bit groups of {group}")
        per = 32 // bits
        w = words.astype(np.uint64)
        vals = np.stack([(w >> np.uint64(bits * i)) & np.uint64(2 ** bits - 1) for i in range(per)], axis=2)
        vals = vals.reshape(rows, cols).astype(np.float64)
        return np.repeat(scales, group, axis=1) * vals + np.repeat(biases, group, axis=1)

    def get(self, name, dtype=np.float64, shape=None):
        if name not in self._entries:
            raise CheckpointError(f"{self.dir}: missing tensor {name}")
        mm, off, dt, shp, path = self._entries[name]
        np_dt, _ = _ST_DTYPES[dt]
        count = int(np.prod(shp, dtype=np.int64)) if shp else 1
        raw = np.frombuffer(mm, dtype=np.dtype(np_dt).newbyteorder("<"), count=count, offset=off)
        raw = raw.reshape(shp)
        if dt == "F8_E4M3":
            # The MXFP8 release: "<module>.weight_scale_inv" holds one UE8M0 exponent s per 1x32
            # block along the row, W = e4m3 * 2^(s - 127) (s = 255: NaN).
            arr = e4m3_to_float64(raw)
            scale_name = name[: -len("weight")] + "weight_scale_inv" if name.endswith("weight") else None
            if scale_name and scale_name in self._entries:
                smm, soff, sdt, sshp, _ = self._entries[scale_name]
                s = np.frombuffer(smm, dtype=np.uint8, count=int(np.prod(sshp)), offset=soff).reshape(sshp).astype(np.float64)
                if len(shp) != 2 or tuple(sshp) != (shp[0], shp[1] // 32):
                    raise CheckpointError(f"{path}: {scale_name}: shape {list(sshp)}, expected [{shp[0]}, {shp[1] // 32}]")
                factor = np.where(s == 255, np.nan, 2.0 ** (s - 127.0))
                arr = arr * np.repeat(factor, 32, axis=1)
        elif dt == "U32":
            arr = self._affine(name, raw, path)
        else:
            arr = bf16_to_float32(raw) if dt == "BF16" else raw
        out = arr.astype(dtype)  # bf16/f16/f32/e4m3 x 2^k -> f64 is exact
        if shape is not None and tuple(out.shape) != tuple(shape):
            raise CheckpointError(f"{path}: tensor {name}: shape {list(out.shape)} but the config implies "
                                  f"{list(shape)}")
        return out


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


class TextConfig:
    def __init__(self, cfg):
        t = cfg.get("text_config", cfg)
        self.raw = t
        self.hidden_size = int(t["hidden_size"])
        self.num_hidden_layers = int(t["num_hidden_layers"])
        self.num_attention_heads = int(t["num_attention_heads"])
        self.num_key_value_heads = int(t.get("num_key_value_heads", self.num_attention_heads))
        self.head_dim = int(t.get("head_dim") or self.hidden_size // self.num_attention_heads)
        self.vocab_size = int(t["vocab_size"])
        self.rms_norm_eps = float(t.get("rms_norm_eps", 1e-6))
        self.use_gemma_norm = bool(t.get("use_gemma_norm", True))
        self.rope_theta = float(t.get("rope_theta", 10000.0))
        if t.get("rotary_dim"):
            self.rotary_dim = int(t["rotary_dim"])
        elif t.get("partial_rotary_factor") is not None:
            self.rotary_dim = int(round(float(t["partial_rotary_factor"]) * self.head_dim))
        else:
            self.rotary_dim = self.head_dim
        self.hidden_act = t.get("hidden_act", "swigluoai")
        self.swiglu_alpha = float(t.get("swiglu_alpha", 1.702))
        self.swiglu_limit = float(t.get("swiglu_limit", 7.0))
        self.swiglu_beta = float(t.get("swiglu_beta", 1.0))
        self.use_qk_norm = bool(t.get("use_qk_norm", True))
        self.qk_norm_type = t.get("qk_norm_type", "per_head")
        self.attention_output_gate = bool(t.get("attention_output_gate", False))
        self.tie_word_embeddings = bool(t.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
        self.num_local_experts = int(t.get("num_local_experts", 0))
        self.num_experts_per_tok = int(t.get("num_experts_per_tok", 0))
        self.scoring_func = t.get("scoring_func", "sigmoid")
        self.use_routing_bias = bool(t.get("use_routing_bias", True))
        self.routed_scaling_factor = float(t.get("routed_scaling_factor", 1.0))
        self.n_shared_experts = int(t.get("n_shared_experts", 1 if t.get("shared_intermediate_size") else 0))
        n = self.num_hidden_layers
        self.moe_layer_freq = list(t.get("moe_layer_freq", [0] * n))
        sa = t.get("sparse_attention_config", {}) or {}
        self.use_sparse_attention = bool(sa.get("use_sparse_attention", False))
        self.sparse_attention_freq = list(sa.get("sparse_attention_freq", [0] * n))
        self.index_dim = int(sa.get("sparse_index_dim", self.head_dim))
        self.num_index_heads = int(sa.get("sparse_num_index_heads", self.num_key_value_heads))
        self.topk_blocks = int(sa.get("sparse_topk_blocks", 16))
        self.block_size = int(sa.get("sparse_block_size", 128))
        self.score_type = sa.get("sparse_score_type", "max")
        self.init_block = int(sa.get("sparse_init_block", 0))
        self.local_block = int(sa.get("sparse_local_block", 1))
        self._check()

    def _check(self):
        def need(cond, what):
            if not cond:
                raise CheckpointError(f"config.json: unsupported or inconsistent: {what}")
        need(len(self.moe_layer_freq) == self.num_hidden_layers, "moe_layer_freq length")
        need(self.num_attention_heads % self.num_key_value_heads == 0, "num_attention_heads % num_key_value_heads")
        need(self.rotary_dim % 2 == 0 and 0 <= self.rotary_dim <= self.head_dim, "rotary_dim")
        need(self.hidden_act == "swigluoai", f"hidden_act {self.hidden_act!r}")
        need(not self.attention_output_gate, "attention_output_gate=true")
        need(self.qk_norm_type == "per_head", f"qk_norm_type {self.qk_norm_type!r}")
        if any(self.moe_layer_freq):
            need(self.scoring_func == "sigmoid", f"scoring_func {self.scoring_func!r}")
            need(0 < self.num_experts_per_tok <= self.num_local_experts, "num_experts_per_tok")
            need(self.n_shared_experts in (0, 1), "n_shared_experts > 1")
        if self.use_sparse_attention and any(self.sparse_attention_freq):
            need(len(self.sparse_attention_freq) == self.num_hidden_layers, "sparse_attention_freq length")
            need(self.score_type == "max", f"sparse_score_type {self.score_type!r}")
            need(self.init_block == 0, "sparse_init_block != 0")
            need(self.local_block == 1, "sparse_local_block != 1")
            need(self.num_index_heads == self.num_key_value_heads, "sparse_num_index_heads != num_key_value_heads")
            need(self.rotary_dim <= self.index_dim, "rotary_dim > sparse_index_dim")
            need(self.topk_blocks >= 1 and self.block_size >= 1, "sparse_topk_blocks / sparse_block_size")

    def is_moe(self, layer):
        return self.moe_layer_freq[layer] == 1

    def is_sparse(self, layer):
        return self.use_sparse_attention and self.sparse_attention_freq[layer] == 1


# Query rows processed at once (memory: heads_per_group x chunk x T doubles). selftest lowers them
# to exercise chunk boundaries.
SELECT_CHUNK = 512
ATTN_CHUNK = 256

# --------------------------------------------------------------------------------------------
# Building blocks (pure functions, each tested in selftest.py)
# --------------------------------------------------------------------------------------------


def rms_norm(x, w, eps, gemma=True):
    """Gemma RMSNorm over the last axis: x * (mean(x^2)+eps)^-1/2 * (1+w)  (plain: * w)."""
    scale = (1.0 + w) if gemma else w
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def rope_neox_partial(x, positions, rotary_dim, theta):
    """x [T, heads, D]; rotates dims [0, rotary_dim) as NeoX pairs (j, j + rotary_dim/2),
    angle = position * theta^(-2j/rotary_dim); dims >= rotary_dim pass through."""
    if rotary_dim == 0:
        return x
    half = rotary_dim // 2
    j = np.arange(half, dtype=np.float64)
    inv_freq = theta ** (-2.0 * j / rotary_dim)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]  # [T, half]
    cos = np.cos(ang).astype(x.dtype)[:, None, :]
    sin = np.sin(ang).astype(x.dtype)[:, None, :]
    out = x.copy()
    a = x[..., :half]
    b = x[..., half:rotary_dim]
    out[..., :half] = a * cos - b * sin
    out[..., half:rotary_dim] = b * cos + a * sin
    return out


def sigmoid(x):
    """1/(1+e^-x), evaluated without overflow and with full relative precision for x << 0."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def swigluoai(g, u, alpha=1.702, limit=7.0, beta=1.0):
    """g' = min(g, limit); u' = clip(u, -limit, limit); g' * sigmoid(alpha g') * (u' + beta)."""
    g = np.minimum(g, limit)
    u = np.clip(u, -limit, limit)
    return g * sigmoid(alpha * g) * (u + beta)


def msa_select_blocks(iq, ik, block_size, topk, chunk=None):
    """MSA block selection (spec §4.2-§4.4) for queries and keys at positions 0..T-1.

    iq [T, G, D] index queries (normed + roped), ik [T, D] index keys (normed + roped).
    Returns (sel, margin):
      sel    bool [G, T, nb]: block b selected for (group g, token p)
      margin float [G, T]: score gap between the last selected and the best unselected candidate
             (+inf where every visible block is taken); small margins flag near-ties.
    """
    T, G, D = iq.shape
    chunk = chunk or SELECT_CHUNK
    B = block_size
    nb = (T + B - 1) // B
    scale = 1.0 / math.sqrt(D)
    sel = np.zeros((G, T, nb), dtype=bool)
    margin = np.full((G, T), np.inf)
    blk_ids = np.arange(nb)
    for q0 in range(0, T, chunk):
        q1 = min(T, q0 + chunk)
        p = np.arange(q0, q1)
        L = p // B  # local block of each query
        nbc = (q1 + B - 1) // B  # blocks touching keys [0, q1)
        causal = np.arange(q1)[None, :] <= p[:, None]  # [C, q1]
        for g in range(G):
            s = (iq[q0:q1, g, :] @ ik[:q1].T) * scale  # [C, q1]
            s = np.where(causal, s, -np.inf)
            pad = nbc * B - q1
            if pad:
                s = np.concatenate([s, np.full((q1 - q0, pad), -np.inf)], axis=1)
            bs = s.reshape(q1 - q0, nbc, B).max(axis=2)  # token-causal block max [C, nbc]
            dense_rows = (L + 1) <= topk
            # Candidates: blocks strictly before the local one.
            cand = np.where(blk_ids[None, :nbc] < L[:, None], bs, -np.inf)
            order = np.argsort(-cand, axis=1, kind="stable")  # score desc, ties -> smaller id
            rows = np.arange(q1 - q0)
            chosen = np.zeros((q1 - q0, nbc), dtype=bool)
            if topk > 1:
                top = order[:, :topk - 1]
                chosen[rows[:, None], top] = True
            chosen[rows, L] = True
            dense = blk_ids[None, :nbc] <= L[:, None]
            chosen = np.where(dense_rows[:, None], dense, chosen)
            sel[g, q0:q1, :nbc] = chosen
            sparse_rows = ~dense_rows
            if sparse_rows.any():
                srt = np.take_along_axis(cand, order, axis=1)
                last_in = srt[:, topk - 2] if topk > 1 else np.full(q1 - q0, np.inf)
                first_out = srt[:, topk - 1]
                with np.errstate(invalid="ignore"):  # inf - inf on dense rows, replaced below
                    m = last_in - first_out
                margin[g, q0:q1] = np.where(sparse_rows, m, np.inf)
    return sel, margin


def attention(q, k, v, block_sel=None, block_size=None, chunk=None):
    """Causal GQA attention. q [T, H, D], k [T, KV, D], v [T, KV, Dv] -> [T, H, Dv].
    block_sel bool [KV, T, nb] (MSA): query heads of group g see key t <= p only if t's block is
    selected for (g, p)."""
    T, H, D = q.shape
    chunk = chunk or ATTN_CHUNK
    KV = k.shape[1]
    hpg = H // KV
    scale = 1.0 / math.sqrt(D)
    out = np.empty((T, H, v.shape[2]), dtype=q.dtype)
    for q0 in range(0, T, chunk):
        q1 = min(T, q0 + chunk)
        p = np.arange(q0, q1)
        t = np.arange(q1)
        causal = t[None, :] <= p[:, None]  # [C, q1]
        for g in range(KV):
            mask = causal
            if block_sel is not None:
                mask = causal & block_sel[g, q0:q1][:, t // block_size]
            qg = q[q0:q1, g * hpg:(g + 1) * hpg, :].transpose(1, 0, 2)  # [hpg, C, D]
            s = np.matmul(qg, k[:q1, g, :].T) * scale  # [hpg, C, q1]
            s = np.where(mask[None], s, -np.inf)
            s -= s.max(axis=2, keepdims=True)
            e = np.exp(s)
            e /= e.sum(axis=2, keepdims=True)
            o = np.matmul(e, v[:q1, g, :])  # [hpg, C, Dv]
            out[q0:q1, g * hpg:(g + 1) * hpg, :] = o.transpose(1, 0, 2)
    return out


def moe_route(router_logits, bias, top_k, scaling, fixed=None):
    """Sigmoid routing with a selection-only bias. Returns (experts [T, k], weights [T, k]).
    Ties in s + bias go to the smaller expert id. fixed: experts [T, k] to use instead of choosing."""
    s = sigmoid(router_logits)
    c = s + (bias if bias is not None else 0.0)
    experts = np.argsort(-c, axis=1, kind="stable")[:, :top_k] if fixed is None else fixed
    se = np.take_along_axis(s, experts, axis=1)
    weights = se / se.sum(axis=1, keepdims=True) * scaling
    return experts, weights


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


class M3Reference:
    def __init__(self, model_dir, dtype=np.float64, cache_dtype="f32", overrides=None, fp8_flip_near=0.0):
        """overrides: {tensor name without "language_model.": array} used instead of the stored
        tensor (the finite-difference checks of the training gradients perturb weights this way).
        fp8_flip_near (fp8 cache): cached values within this relative distance of an E4M3 rounding
        midpoint are rounded the other way. An engine's fp32 values differ from the reference's by
        rounding noise, so such a value may land on either side; a test compares the selection with
        and without the flip to find token sequences whose block selection does not hinge on it."""
        if cache_dtype not in ("f32", "bf16", "fp8"):
            raise ValueError(f"cache_dtype must be f32, bf16 or fp8, not {cache_dtype!r}")
        self.ckpt = Checkpoint(model_dir)
        self.cfg = TextConfig(self.ckpt.config)
        self.dtype = dtype
        self.cache_dtype = cache_dtype
        self.fp8_flip_near = fp8_flip_near
        self.overrides = overrides if overrides is not None else {}
        self._train = None  # set by losses()

    def _cached(self, x):
        """What reading x back from the KV cache gives: x itself, or x rounded to bf16."""
        if self.cache_dtype == "fp8":
            return round_to_fp8_cache(x, self.fp8_flip_near)
        return round_to_bf16(x) if self.cache_dtype == "bf16" else x

    def w(self, name, shape=None):
        if name in self.overrides:
            return self.overrides[name]
        return self.ckpt.get(PREFIX + name, dtype=self.dtype, shape=shape)

    def _ffn(self, x, gate, up, down):
        c = self.cfg
        return swigluoai(x @ gate.T, x @ up.T, c.swiglu_alpha, c.swiglu_limit, c.swiglu_beta) @ down.T

    def _mlp(self, L, h):
        pre = f"model.layers.{L}.mlp."
        return self._ffn(h, self.w(pre + "gate_proj.weight"), self.w(pre + "up_proj.weight"),
                         self.w(pre + "down_proj.weight"))

    def _moe(self, L, h, info):
        c = self.cfg
        pre = f"model.layers.{L}.block_sparse_moe."
        E = c.num_local_experts
        gate = self.w(pre + "gate.weight", shape=(E, c.hidden_size))
        bias = None
        if c.use_routing_bias:
            bias = self.w(pre + "e_score_correction_bias", shape=(E,))
        frozen = self._train["frozen"] if self._train else None
        experts, weights = moe_route(h @ gate.T, bias, c.num_experts_per_tok, c.routed_scaling_factor,
                                     fixed=frozen["experts"][L] if frozen else None)
        if self._train:
            self._train["experts"][L] = experts
        if info is not None:
            info["experts"][L] = experts
        y = np.zeros_like(h)
        for e in range(E):
            tok, slot = np.nonzero(experts == e)
            if tok.size == 0:
                continue
            ep = pre + f"experts.{e}."
            ye = self._ffn(h[tok], self.w(ep + "w1.weight"), self.w(ep + "w3.weight"), self.w(ep + "w2.weight"))
            y[tok] += weights[tok, slot][:, None] * ye  # tok has no repeats: experts per token differ
        if c.n_shared_experts:
            sp = pre + "shared_experts."
            y = y + self._ffn(h, self.w(sp + "gate_proj.weight"), self.w(sp + "up_proj.weight"),
                              self.w(sp + "down_proj.weight"))
        return y

    def _attn(self, L, h, pos, info):
        c = self.cfg
        T = h.shape[0]
        H, KV, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        pre = f"model.layers.{L}.self_attn."
        q = (h @ self.w(pre + "q_proj.weight", shape=(H * D, c.hidden_size)).T).reshape(T, H, D)
        k = (h @ self.w(pre + "k_proj.weight", shape=(KV * D, c.hidden_size)).T).reshape(T, KV, D)
        v = (h @ self.w(pre + "v_proj.weight").T).reshape(T, KV, -1)
        if c.use_qk_norm:
            q = rms_norm(q, self.w(pre + "q_norm.weight", shape=(D,)), c.rms_norm_eps, c.use_gemma_norm)
            k = rms_norm(k, self.w(pre + "k_norm.weight", shape=(D,)), c.rms_norm_eps, c.use_gemma_norm)
        q = rope_neox_partial(q, pos, c.rotary_dim, c.rope_theta)
        k = self._cached(rope_neox_partial(k, pos, c.rotary_dim, c.rope_theta))
        v = self._cached(v)
        sel = None
        if c.is_sparse(L):
            G, Di = c.num_index_heads, c.index_dim
            iq = (h @ self.w(pre + "index_q_proj.weight", shape=(G * Di, c.hidden_size)).T).reshape(T, G, Di)
            ik = (h @ self.w(pre + "index_k_proj.weight", shape=(Di, c.hidden_size)).T).reshape(T, 1, Di)
            iq = rms_norm(iq, self.w(pre + "index_q_norm.weight", shape=(Di,)), c.rms_norm_eps, c.use_gemma_norm)
            ik = rms_norm(ik, self.w(pre + "index_k_norm.weight", shape=(Di,)), c.rms_norm_eps, c.use_gemma_norm)
            iq = rope_neox_partial(iq, pos, c.rotary_dim, c.rope_theta)
            ik = self._cached(rope_neox_partial(ik, pos, c.rotary_dim, c.rope_theta)[:, 0, :])
            frozen = self._train["frozen"] if self._train else None
            if frozen:
                sel = frozen["selection"][L]
            else:
                sel, margin = msa_select_blocks(iq, ik, c.block_size, c.topk_blocks)
                if info is not None:
                    info["selection"][L] = sel
                    info["margin"][L] = margin
            if self._train:
                self._train["selection"][L] = sel
                if self._train["warmup"]:
                    sel = None  # dense main attention, and the KL over the whole causal history
                self._train["kl"][L] = indexer_kl(q, k, iq, ik, sel, c.block_size)
        o = attention(q, k, v, sel, c.block_size)
        return o.reshape(T, -1) @ self.w(pre + "o_proj.weight").T

    def forward(self, tokens, return_selection=False, return_hidden=False, verbose=False, embeddings_override=None):
        """tokens: ids at positions 0..T-1. embeddings_override: optional (positions, rows [n, hidden])
        whose rows replace the token embeddings at those positions (image tokens, spec §5.3; positions
        stay 1-D). Returns logits [T, vocab] (self.dtype), or
        (logits, info) when return_selection/return_hidden: info["selection"][L] bool [G, T, nb],
        info["margin"][L] [G, T], info["experts"][L] [T, k], info["hidden"] list of [T, hidden]
        (embedding output, then the residual after each layer)."""
        c = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= c.vocab_size:
            raise ValueError(f"token id out of range [0, {c.vocab_size})")
        want_info = return_selection or return_hidden
        info = {"selection": {}, "margin": {}, "experts": {}, "hidden": []} if want_info else None
        T = tokens.size
        pos = np.arange(T)
        x = self.w("model.embed_tokens.weight", shape=(c.vocab_size, c.hidden_size))[tokens]
        if embeddings_override is not None:
            opos, orows = embeddings_override
            opos = np.asarray(opos, dtype=np.int64)
            orows = np.asarray(orows, dtype=self.dtype)
            if orows.shape != (opos.size, c.hidden_size) or (opos.size and (opos.min() < 0 or opos.max() >= T)):
                raise ValueError(f"embeddings_override: {opos.size} positions in [0, {T}) with rows "
                                 f"[n, {c.hidden_size}] expected, got rows {list(orows.shape)}")
            x[opos] = orows
        if return_hidden:
            info["hidden"].append(x.copy())
        for L in range(c.num_hidden_layers):
            t0 = time.time()
            pre = f"model.layers.{L}."
            h = rms_norm(x, self.w(pre + "input_layernorm.weight"), c.rms_norm_eps, c.use_gemma_norm)
            x = x + self._attn(L, h, pos, info)
            h = rms_norm(x, self.w(pre + "post_attention_layernorm.weight"), c.rms_norm_eps, c.use_gemma_norm)
            x = x + (self._moe(L, h, info) if c.is_moe(L) else self._mlp(L, h))
            if return_hidden:
                info["hidden"].append(x.copy())
            if verbose:
                kind = ("MSA" if c.is_sparse(L) else "dense") + "/" + ("MoE" if c.is_moe(L) else "MLP")
                print(f"layer {L} ({kind}): {time.time() - t0:.2f} s", file=sys.stderr)
        y = rms_norm(x, self.w("model.norm.weight"), c.rms_norm_eps, c.use_gemma_norm)
        head = "lm_head.weight"
        if not self.ckpt.has(PREFIX + head) and c.tie_word_embeddings:
            head = "model.embed_tokens.weight"
        logits = y @ self.w(head, shape=(c.vocab_size, c.hidden_size)).T
        return (logits, info) if want_info else logits


def indexer_kl(q, k, iq, ik, block_sel, block_size):
    """The MSA indexer objective of one layer (spec §4.7): (1/(G*T)) sum_p sum_g KL(Pbar_g(p) || Q_g(p))
    over each query's support: its selected blocks (block_sel bool [G, T, nb]) or, with block_sel None,
    its whole causal history. Pbar_g = mean over group g's query heads of softmax(q.k/sqrt(D)) on the
    support; Q_g = softmax(iq_g.ik/sqrt(Di)) on the same keys. Full [T, T] matrices: test sizes only."""
    T, H, D = q.shape
    G, Di = iq.shape[1], iq.shape[2]
    hpg = H // G
    t = np.arange(T)
    causal = t[None, :] <= t[:, None]
    total = 0.0
    for g in range(G):
        support = causal if block_sel is None else causal & block_sel[g][:, t // block_size]
        s = np.einsum("phd,td->hpt", q[:, g * hpg:(g + 1) * hpg, :], k[:, g, :]) / math.sqrt(D)
        s = np.where(support[None], s, -np.inf)
        s = s - s.max(axis=2, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=2, keepdims=True)
        teacher = p.mean(axis=0)  # [T, T]
        z = np.where(support, (iq[:, g, :] @ ik.T) / math.sqrt(Di), -np.inf)
        log_q = z - z.max(axis=1, keepdims=True)
        log_q = log_q - np.log(np.exp(log_q).sum(axis=1, keepdims=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(support & (teacher > 0), teacher * (np.log(teacher) - log_q), 0.0)
        total += terms.sum()
    return total / (G * T)


def training_losses(ref, tokens, warmup=False, frozen=None):
    """The training losses of one sequence (the contract of `m3 grad`, docs/TRAINING.md):
    L_CE = mean over t < T-1 of -log softmax(logits_t)[tokens[t+1]], and L_KL = sum over MSA layers of
    indexer_kl. warmup: main attention dense and the KL over the whole causal history. frozen: the
    decisions of an earlier call (MSA selections, MoE top-k) to hold fixed. Returns
    (ce, kl, {layer: kl}, decisions)."""
    ref._train = {"warmup": warmup, "frozen": frozen, "kl": {}, "selection": {}, "experts": {}}
    try:
        logits = ref.forward(tokens)
    finally:
        train, ref._train = ref._train, None
    tokens = np.asarray(tokens, dtype=np.int64)
    z = logits[:-1]
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    ce = float(np.mean(lse - z[np.arange(z.shape[0]), tokens[1:]]))
    decisions = {"selection": train["selection"], "experts": train["experts"]}
    return ce, float(sum(train["kl"].values())), train["kl"], decisions


def run_reference(model_dir, tokens, return_selection=False, dtype=np.float64, cache_dtype="f32"):
    return M3Reference(model_dir, dtype=dtype, cache_dtype=cache_dtype).forward(tokens, return_selection=return_selection)


def read_token_file(path):
    with open(path, "r", encoding="utf-8") as f:
        text = f.read().replace(",", " ").split()
    return [int(t) for t in text]


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 NumPy reference logits of a MiniMax-M3 checkpoint")
    ap.add_argument("--model", required=True, help="checkpoint folder (config.json + safetensors)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--tokens", help="comma-separated token ids")
    g.add_argument("--tokens-file", help="file of token ids (comma or whitespace separated)")
    ap.add_argument("--out", help="output .npy: logits [T, vocab] float64 (required unless --losses)")
    ap.add_argument("--losses", action="store_true", help="print the training losses (CE, indexer KL) instead")
    ap.add_argument("--indexer-warmup", action="store_true", help="with --losses: the dense warm-up stage")
    ap.add_argument("--selection-out", help="optional .npz: per MSA layer selected blocks [groups, T, blocks] "
                    "and selection margins")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--cache-dtype", choices=["f32", "bf16", "fp8"], default="f32",
                    help="bf16: round K, V and index keys to bf16 as a bf16 KV cache stores them")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    tokens = [int(t) for t in a.tokens.split(",") if t.strip()] if a.tokens else read_token_file(a.tokens_file)
    t0 = time.time()
    ref = M3Reference(a.model, dtype=np.float64 if a.dtype == "float64" else np.float32, cache_dtype=a.cache_dtype)
    if a.losses:
        ce, kl, per_layer, _ = training_losses(ref, tokens, warmup=a.indexer_warmup)
        print(f"ce_loss {ce:.12g}\nkl_loss {kl:.12g}")
        for L, v in sorted(per_layer.items()):
            print(f"layer {L} kl {v:.12g}")
        return 0
    if not a.out:
        ap.error("--out is required (or --losses)")
    logits, info = ref.forward(tokens, return_selection=True, verbose=a.verbose)
    np.save(a.out, logits)
    if a.selection_out:
        arrays = {}
        for L, s in info["selection"].items():
            arrays[f"layer{L}_selection"] = s
            arrays[f"layer{L}_margin"] = info["margin"][L]
        np.savez_compressed(a.selection_out, **arrays)
    print(f"m3_reference: {len(tokens)} tokens, logits {list(logits.shape)} -> {a.out} "
          f"({time.time() - t0:.1f} s)")
    for L, sel in info["selection"].items():
        m = info["margin"][L]
        fin = m[np.isfinite(m)]
        visible = np.arange(len(tokens)) // ref.cfg.block_size + 1
        sparse_tokens = int((sel.sum(axis=2) < visible[None, :]).any(axis=0).sum())
        print(f"  MSA layer {L}: {sparse_tokens} tokens sparse, min selection margin "
              f"{(fin.min() if fin.size else float('inf')):.3g}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (CheckpointError, ValueError, OSError) as e:
        print(f"m3_reference: error: {e}", file=sys.stderr)
        sys.exit(1)
