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

Video (spec §5.2, §5.3): sample_frame_indices, video_smart_resize, preprocess_video_frames (Pillow
bicubic per frame, CLIP normalisation, temporal pad by repeating the last frame, patchify in
(t, bh, bw, sh, sw) x (c, tp, ph, pw) order), group_timestamps and timestamp_text. A video is one
forward() call: its segments are chunks of <= vision_segment_max_frames temporal groups.

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


# ---- video preprocessing (spec §5.2) --------------------------------------------------------------

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def sample_frame_indices(total, src_fps, fps=1.0, min_frames=4, max_frames=768, max_duration=300.0):
    """Frame 0, then next = max(ceil((prev_ts + 1/fps - 1e-4) * src_fps), last + 1) until past the end.
    Longer than max_duration: int(max_duration * fps) instants linspace(0, duration) -> ceil(t * src_fps).
    More than max_frames / fewer than min_frames: that many, evenly spaced (floor(i * n / count))."""
    duration = total / src_fps
    if duration <= max_duration:
        idx = [0]
        while True:
            nxt = max(math.ceil((idx[-1] / src_fps + 1.0 / fps - 1e-4) * src_fps), idx[-1] + 1)
            if nxt >= total:
                break
            idx.append(nxt)
    else:
        n = int(max_duration * fps)
        if n >= total:
            idx = list(range(total))
        else:
            ts = np.linspace(0, duration, n, endpoint=True)
            idx = sorted({min(total - 1, math.ceil(t * src_fps)) for t in ts})

    def evenly(src, count):
        return [src[i * len(src) // count] for i in range(count)]

    if len(idx) > max_frames:
        idx = evenly(idx, max_frames)
    if len(idx) < min_frames and len(idx) < total:
        idx = evenly(list(range(total)), min(min_frames, total))
    return idx


def smart_resize(h, w, min_pixels, max_pixels, factor=28):
    if max(h, w) / min(h, w) > 200:
        raise ValueError(f"aspect ratio of {w}x{h} above 200")
    hb = max(factor, round(h / factor) * factor)
    wb = max(factor, round(w / factor) * factor)
    if hb * wb > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        hb, wb = max(factor, math.floor(h / beta / factor) * factor), max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def video_smart_resize(h, w, frames, min_pixels=3136, max_pixels=602112, total_pixels=45158400, temporal=2):
    """Per-frame bound max(min(max_pixels, total_pixels / padded_frames * 2), min_pixels * 1.05)."""
    padded = -(-frames // temporal) * temporal
    bound = max(min(max_pixels, total_pixels / padded * temporal), int(min_pixels * 1.05))
    return smart_resize(h, w, min_pixels, bound)


def preprocess_video_frames(frames, patch=14, merge=2, temporal=2, **resize_kw):
    """frames: uint8 [n, H, W, 3] (decoded sampled frames) -> (pixel_values float32 as the processor
    computes them, grid (t, h, w))."""
    from PIL import Image
    n, H, W = frames.shape[:3]
    rh, rw = video_smart_resize(H, W, n, temporal=temporal, **resize_kw)
    out = []
    for f in frames:
        im = Image.fromarray(np.ascontiguousarray(f.astype(np.uint8)), "RGB")
        if (rw, rh) != (W, H):
            im = im.resize((rw, rh), Image.BICUBIC)
        out.append(np.asarray(im))
    while len(out) % temporal:
        out.append(out[-1])
    v = np.stack(out).astype(np.float32)  # [T, H', W', 3]
    m32 = np.array(CLIP_MEAN, np.float32) * np.float32(255)
    s32 = np.array(CLIP_STD, np.float32) * np.float32(255)
    x = ((v - m32) / s32).transpose(0, 3, 1, 2)  # [T, 3, H', W']
    gt, gh, gw = len(out) // temporal, rh // patch, rw // patch
    p = x.reshape(gt, temporal, 3, gh // merge, merge, patch, gw // merge, merge, patch)
    p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)  # (t, bh, bw, sh, sw, c, tp, ph, pw)
    return p.reshape(gt * gh * gw, 3 * temporal * patch * patch), (gt, gh, gw)


def group_timestamps(indices, src_fps, temporal=2):
    groups = -(-len(indices) // temporal)
    return [indices[min(k * temporal, len(indices) - 1)] / src_fps for k in range(groups)]


def timestamp_text(ts):
    return f"]<]{ts:.1f} seconds[>["


class VisionReference:
    def __init__(self, model_dir, rope_variant="neox", segment_max_frames=None):
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
        self.seg_frames = segment_max_frames or v.get("vision_segment_max_frames", 4)
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
