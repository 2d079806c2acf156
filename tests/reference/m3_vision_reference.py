#!/usr/bin/python3
"""Float64 NumPy reference of the MiniMax-M3 vision tower, projector and merger
(/work/shared/M3-ARCHITECTURE.md §2.4, §5.4, §5.5), written from the spec independently of the engine.

  x = pixel_values [N, C*tp*P*P] . W_patch[vh, C*tp*P*P]^T           (Conv3d k=stride=(tp,P,P), no bias)
  x = LayerNorm(x; pre_layrnorm)
  per layer: x += out_proj(MHA(LN1(x)))  with biased q/k/v, 3D RoPE on q and k, full attention within
             a segment (an image; video: chunks of <= vision_segment_max_frames temporal groups)
             x += fc2(GELU_erf(fc1(LN2(x))))
  (no post-LN)
  z = linear_2(GELU(linear_1(x)))                                   multi_modal_projector, per patch
  out = patch_merge_mlp.linear_2(GELU(linear_1(concat of each 4 consecutive z rows)))

3D RoPE (spec §5.4.4): axis = 2*((head_dim//3)//2) dims per axis (26 for head_dim 80; the same formula
for any head_dim), inv_freq_k = theta^(-2k/axis), k < axis/2; angle vector [t*f, h*f, w*f] of length
half = 3*axis/2; NeoX pairs (j, j+half); dims >= 2*half pass through. t restarts per segment; h, w are
the patch row/column, recovered from the (t, bh, bw, sh, sw) row order: row = bh*m + sh, col = bw*m + sw.

The checkpoint's vision tensors and config.json are read here (Checkpoint from m3_reference.py, which
widens bf16/f16/f32 exactly). Command line:
  /usr/bin/python3 tests/reference/m3_vision_reference.py --model DIR --pixels pv.npy --grid T,H,W --out emb.npy
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m3_reference import Checkpoint, CheckpointError  # noqa: E402

VM = "vision_tower.vision_model."


def gelu_erf(x):
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rope_axis_dim(head_dim):
    return 2 * ((head_dim // 3) // 2)


def patch_coordinates(grid, merge, segment_max_frames):
    """[N, 3] (t within segment, row, col) for rows in (t, bh, bw, sh, sw) order, and the segment id per row."""
    t_n, h_n, w_n = grid
    N = t_n * h_n * w_n
    i = np.arange(N)
    sw = i % merge
    sh = (i // merge) % merge
    bw = (i // (merge * merge)) % (w_n // merge)
    bh = (i // (merge * merge * (w_n // merge))) % (h_n // merge)
    t = i // (h_n * w_n)
    seg = t // segment_max_frames
    coords = np.stack([t - seg * segment_max_frames, bh * merge + sh, bw * merge + sw], axis=1)
    return coords, seg


def rope_3d_interleaved(x, coords, head_dim, theta):
    """Opt-in transformers-port variant (non-authoritative): t, h get axis dims, w the rest
    (26/26/28 for head_dim 80); within each axis block interleaved pairs (2k, 2k+1) rotate by
    coord * theta^(-2k/n)."""
    axis = rope_axis_dim(head_dim)
    out = x.copy()
    base = 0
    for a, n in enumerate((axis, axis, head_dim - 2 * axis)):
        k = np.arange(n // 2, dtype=np.float64)
        ang = coords[:, a:a + 1].astype(np.float64) * (theta ** (-2.0 * k / n))[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        ev, od = x[..., base:base + n:2], x[..., base + 1:base + n:2]
        out[..., base:base + n:2] = ev * cos - od * sin
        out[..., base + 1:base + n:2] = od * cos + ev * sin
        base += n
    return out


def rope_3d(x, coords, head_dim, theta):
    """x [N, heads, head_dim]."""
    axis = rope_axis_dim(head_dim)
    k = np.arange(axis // 2, dtype=np.float64)
    inv = theta ** (-2.0 * k / axis)
    ang = np.concatenate([coords[:, a:a + 1].astype(np.float64) * inv[None, :] for a in range(3)], axis=1)
    half = ang.shape[1]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    a, b = x[..., :half], x[..., half:2 * half]
    out[..., :half] = a * cos - b * sin
    out[..., half:2 * half] = b * cos + a * sin
    return out


class VisionReference:
    def __init__(self, model_dir, rope_variant="neox"):
        self.rope = {"neox": rope_3d, "hf-interleaved": rope_3d_interleaved}[rope_variant]
        self.ckpt = Checkpoint(model_dir)
        cfg = self.ckpt.config
        if "vision_config" not in cfg:
            raise CheckpointError(f"{model_dir}: config.json has no vision_config")
        v = cfg["vision_config"]
        self.vh = v["hidden_size"]
        self.heads = v["num_attention_heads"]
        self.layers = v["num_hidden_layers"]
        self.inter = v["intermediate_size"]
        self.patch = v.get("patch_size", 14)
        self.channels = v.get("num_channels", 3)
        self.theta = v.get("rope_theta", 10000.0)
        self.eps = v.get("layer_norm_eps", 1e-5)
        self.seg_frames = v.get("vision_segment_max_frames", 4)
        comp = cfg.get("img_token_compression_config") or v.get("img_token_compression_config") or {}
        self.merge = comp.get("spatial_merge_size", 2)
        self.tp = comp.get("temporal_patch_size", 2)
        self.P = cfg["projector_hidden_size"]

    def w(self, name, shape=None):
        return self.ckpt.get(name, dtype=np.float64, shape=shape)

    def lin(self, x, name, out, inp):
        return x @ self.w(name + ".weight", shape=(out, inp)).T + self.w(name + ".bias", shape=(out,))

    def encode(self, pixels, grid):
        vh, H = self.vh, self.heads
        hd = vh // H
        K = self.channels * self.tp * self.patch * self.patch
        pixels = np.asarray(pixels, dtype=np.float64)
        N = int(np.prod(grid))
        if pixels.shape != (N, K):
            raise ValueError(f"pixel_values shape {pixels.shape}, expected {(N, K)} for grid {grid}")
        wp = self.w(VM + "embeddings.patch_embedding.weight", shape=(vh, self.channels, self.tp, self.patch, self.patch))
        x = pixels @ wp.reshape(vh, K).T
        x = layer_norm(x, self.w(VM + "pre_layrnorm.weight"), self.w(VM + "pre_layrnorm.bias"), self.eps)
        coords, seg = patch_coordinates(grid, self.merge, self.seg_frames)
        same = seg[:, None] == seg[None, :]
        for L in range(self.layers):
            p = VM + f"encoder.layers.{L}."
            h = layer_norm(x, self.w(p + "layer_norm1.weight", shape=(vh,)), self.w(p + "layer_norm1.bias"), self.eps)
            q = self.lin(h, p + "self_attn.q_proj", vh, vh).reshape(N, H, hd)
            k = self.lin(h, p + "self_attn.k_proj", vh, vh).reshape(N, H, hd)
            v = self.lin(h, p + "self_attn.v_proj", vh, vh).reshape(N, H, hd)
            q = self.rope(q, coords, hd, self.theta)
            k = self.rope(k, coords, hd, self.theta)
            s = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd)
            s = np.where(same[None], s, -np.inf)
            s -= s.max(axis=2, keepdims=True)
            e = np.exp(s)
            e /= e.sum(axis=2, keepdims=True)
            o = np.einsum("hij,jhd->ihd", e, v).reshape(N, vh)
            x = x + self.lin(o, p + "self_attn.out_proj", vh, vh)
            h = layer_norm(x, self.w(p + "layer_norm2.weight", shape=(vh,)), self.w(p + "layer_norm2.bias"), self.eps)
            f = gelu_erf(self.lin(h, p + "mlp.fc1", self.inter, vh))
            x = x + self.lin(f, p + "mlp.fc2", vh, self.inter)
        return x

    def forward(self, pixels, grid):
        """pixel_values [N, 1176], grid (t, h, w) -> merged embeddings [N / merge^2, P] float64."""
        P, m2 = self.P, self.merge * self.merge
        x = self.encode(pixels, grid)
        z = self.lin(gelu_erf(self.lin(x, "multi_modal_projector.linear_1", P, self.vh)),
                     "multi_modal_projector.linear_2", P, P)
        z = z.reshape(-1, m2 * P)  # each merge^2 consecutive rows (one 2x2 window), concatenated in order
        return self.lin(gelu_erf(self.lin(z, "patch_merge_mlp.linear_1", P, m2 * P)), "patch_merge_mlp.linear_2", P, P)


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 NumPy reference of the M3 vision tower + projector + merger")
    ap.add_argument("--model", required=True)
    ap.add_argument("--pixels", required=True, help=".npy pixel_values [N, 1176]")
    ap.add_argument("--grid", required=True, help="grid_thw as T,H,W")
    ap.add_argument("--out", required=True, help="output .npy [N/4, projector_hidden_size] float64")
    ap.add_argument("--rope", choices=["neox", "hf-interleaved"], default="neox",
                    help="3D RoPE variant (neox: the spec's 26/26/26+2; hf-interleaved: opt-in 26/26/28)")
    a = ap.parse_args(argv)
    grid = tuple(int(v) for v in a.grid.replace(" ", ",").split(",") if v)
    emb = VisionReference(a.model, a.rope).forward(np.load(a.pixels), grid)
    np.save(a.out, emb)
    print(f"m3_vision_reference: grid {grid} -> {list(emb.shape)} -> {a.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (CheckpointError, ValueError, OSError) as e:
        print(f"m3_vision_reference: error: {e}", file=sys.stderr)
        sys.exit(1)
