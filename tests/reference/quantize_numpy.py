#!/usr/bin/python3
"""Quantize a checkpoint in NumPy, independently of the engine's code, to the affine layout mlx-lm
writes or to the official MiniMax-M3-MXFP8 release's layout.

    quantize_numpy.py SRC DST [--format affine|mxfp8] [--bits 4] [--group-size 64]
                      [--override MODULE=BITS:GROUP ...]

affine: every 2-D tensor "<module>.weight" of the language model whose columns divide into groups
(embeddings, lm_head, attention, index branch, MLPs, experts, router gates) becomes
  <module>.weight  U32 [rows, cols * bits / 32]  32 / bits values per word, element 0 in the lowest bits
  <module>.scales  BF16 [rows, cols / group]
  <module>.biases  BF16 [rows, cols / group]      W = scale * q + bias
rounded as mlx does it: per group, the bound of larger magnitude (min or max) is the bias, the scale
spans the group in 2^bits - 1 steps (negative when the bias is the max), both stored as bf16, and
q = round((w - bias) / scale) against the stored values, clipped to [0, 2^bits - 1]. config.json
gains mlx-lm's "quantization" block (and its "quantization_config" copy) with the overrides as
per-module entries.

mxfp8: the decoder layers' linears except the router gates (the release's ignored_layers keep the
embedding, lm_head, gates and the vision tower) become
  <module>.weight            F8_E4M3 [rows, cols]
  <module>.weight_scale_inv  U8 [rows, cols / 32]  one UE8M0 exponent s per 1x32 block, W = e4m3 x 2^(s - 127)
with s the smallest exponent that keeps the block's largest magnitude within 448 and each value
rounded to the nearest E4M3 (ties to even); config.json gains the release's quantization_config.

Everything else (norms, routing bias, the vision tower) is copied.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import m3_reference as R  # noqa: E402

ST_NAMES = {np.dtype(np.uint16): "BF16", np.dtype(np.float32): "F32", np.dtype(np.uint32): "U32",
            np.dtype(np.uint8): "U8"}
E4M3 = "F8_E4M3"  # written from uint8 arrays tagged in write_safetensors


def to_bf16_bits(x):
    """float -> bf16 bit patterns, round to nearest even (NaN kept quiet)."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(np.isnan(f), 0x7FC0, rounded).astype(np.uint16)


def quantize(w, bits, group):
    """w [rows, cols] float -> (words U32, scales bf16 bits, biases bf16 bits)."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group).astype(np.float32)
    w_max, w_min = g.max(axis=2), g.min(axis=2)
    n_bins = float(2 ** bits - 1)
    # The bound of larger magnitude is the bias (q = 0 maps to it); the scale's sign points the
    # other bound at q = n_bins.
    min_is_edge = np.abs(w_min) > np.abs(w_max)
    step = np.maximum((w_max - w_min) / n_bins, 1e-7)
    scale = np.where(min_is_edge, step, -step)
    bias = np.where(min_is_edge, w_min, w_max)
    scale_b, bias_b = to_bf16_bits(scale), to_bf16_bits(bias)
    s = R.bf16_to_float32(scale_b).astype(np.float64)[:, :, None]
    b = R.bf16_to_float32(bias_b).astype(np.float64)[:, :, None]
    q = np.clip(np.rint((g - b) / s), 0, n_bins).astype(np.uint32).reshape(rows, cols)
    per = 32 // bits
    q = q.reshape(rows, cols // per, per)
    words = np.zeros((rows, cols // per), dtype=np.uint32)
    for i in range(per):
        words |= q[:, :, i] << np.uint32(bits * i)
    return words, scale_b, bias_b


def e4m3_codes(x):
    """float64 values already within +-448 -> E4M3 bytes (nearest, ties to even)."""
    r = R.round_to_e4m3(x)
    sign = np.signbit(r).astype(np.uint8) << 7  # a negative value rounding to zero is -0, as IEEE rounding keeps the sign
    a = np.abs(r)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    normal = a >= 2.0 ** -6
    exp_field = np.where(normal, e + 7, 0).astype(np.int64)
    man = np.where(normal, a / 2.0 ** e - 1.0, a / 2.0 ** -6) * 8  # 3 mantissa bits
    code = (exp_field << 3) | np.rint(man).astype(np.int64)
    return (sign | np.where(a > 0, code, 0).astype(np.uint8)).astype(np.uint8)


def quantize_mxfp8(w):
    """w [rows, cols] float -> (E4M3 bytes [rows, cols], UE8M0 scales [rows, cols / 32])."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // 32, 32).astype(np.float32).astype(np.float64)
    amax = np.abs(g).max(axis=2)
    e = np.where(amax > 0, np.ceil(np.log2(np.where(amax > 0, amax, 1.0) / 448.0)), 0.0)
    e = np.where(amax > 448.0 * 2.0 ** (e - 1), e, e - 1)
    e = np.where(amax > 448.0 * 2.0 ** e, e + 1, e)
    e = np.clip(e, -127, 127)
    codes = e4m3_codes(g / (2.0 ** e)[:, :, None]).reshape(rows, cols)
    return codes, (e + 127).astype(np.uint8)


def write_safetensors(path, tensors):
    """tensors: list of (name, numpy array[, safetensors dtype]) in the dtypes of ST_NAMES (or tagged,
    e.g. uint8 as F8_E4M3), little-endian, 8-byte aligned."""
    header, offset, blobs = {}, 0, []
    for name, arr, *tag in tensors:
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": tag[0] if tag else ST_NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for blob in blobs:
            f.write(blob)


def raw_tensor(ckpt, name):
    """A tensor as stored: bf16 as uint16 bits, f32 as float32."""
    mm, off, dt, shp, _ = ckpt._entries[name]
    np_dt, _ = R._ST_DTYPES[dt]
    count = int(np.prod(shp, dtype=np.int64)) if shp else 1
    return np.frombuffer(mm, dtype=np.dtype(np_dt).newbyteorder("<"), count=count, offset=off).reshape(shp).copy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--format", choices=["affine", "mxfp8"], default="affine")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--override", action="append", default=[], help="MODULE=BITS:GROUP")
    a = ap.parse_args()
    overrides = {}
    for o in a.override:
        module, spec = o.split("=")
        bits, group = spec.split(":")
        overrides[module] = (int(bits), int(group))

    ckpt = R.Checkpoint(a.src)
    os.makedirs(a.dst, exist_ok=True)
    out = []
    for name in ckpt.names():
        dt = ckpt.dtype_of(name)
        arr = raw_tensor(ckpt, name)
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        bits, group = overrides.get(module, (a.bits, a.group_size))
        if a.format == "mxfp8":
            if (module is not None and name.startswith(R.PREFIX + "model.layers.") and arr.ndim == 2
                    and arr.shape[1] % 32 == 0 and dt in ("BF16", "F32") and not module.endswith(".block_sparse_moe.gate")):
                codes, scales = quantize_mxfp8(ckpt.get(name, dtype=np.float32))
                out += [(name, codes, E4M3), (module + ".weight_scale_inv", scales)]
            else:
                out.append((name, arr))
            continue
        if (module is not None and name.startswith(R.PREFIX) and arr.ndim == 2 and arr.shape[1] % group == 0
                and dt in ("BF16", "F32")):
            w = ckpt.get(name, dtype=np.float32)
            words, scales, biases = quantize(w, bits, group)
            out += [(name, words), (module + ".scales", scales), (module + ".biases", biases)]
        else:
            out.append((name, arr))

    cfg = dict(ckpt.config)
    if a.format == "mxfp8":
        ignored = sorted({n[: -len(".weight")] for n in ckpt.names() if n.endswith(".weight")
                          and ckpt.dtype_of(n) in ("BF16", "F32") and len(ckpt._entries[n][3]) == 2
                          and not (n.startswith(R.PREFIX + "model.layers.") and ".block_sparse_moe.gate." not in n)})
        cfg["quantization_config"] = {"quant_method": "mxfp8", "activation_scheme": "dynamic",
                                      "weight_block_size": [1, 32], "scale_fmt": "ue8m0", "ignored_layers": ignored}
        return finish(a, ckpt, out, cfg)
    block = {"group_size": a.group_size, "bits": a.bits, "mode": "affine"}
    for module, (bits, group) in overrides.items():
        block[module] = {"group_size": group, "bits": bits}
    cfg["quantization"] = block
    cfg["quantization_config"] = block
    finish(a, ckpt, out, cfg)


def finish(a, ckpt, out, cfg):
    """Writes the tensors, config.json and the source's other files."""
    write_safetensors(os.path.join(a.dst, "model.safetensors"), out)
    with open(os.path.join(a.dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    for extra in os.listdir(a.src):
        if extra not in ("config.json", "model.safetensors") and not extra.endswith(".safetensors") and \
                not extra.endswith(".index.json") and os.path.isfile(os.path.join(a.src, extra)):
            shutil.copy(os.path.join(a.src, extra), os.path.join(a.dst, extra))


if __name__ == "__main__":
    main()
