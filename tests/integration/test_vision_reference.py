#!/usr/bin/python3
"""Images through the engine vs the float64 NumPy references (spec §5.3-§5.5).

A tiny random checkpoint with a vision tower (`m3 make-checkpoint --preset tiny-vl`) and small images
of odd sizes written with Pillow go through `m3 logits --text ... --image ...`, which preprocesses,
runs the vision tower + projector + merger, expands each ]<]image[>[ into start + N image + end
tokens and replaces the N rows with the merged embeddings. The same is computed by
tests/reference/m3_vision_reference.py (vision) and m3_reference.py (text, with the image rows as an
embeddings override), from the engine's own pixel_values (`m3 preprocess-image`, itself checked
against Pillow in test_vision_preprocess.py). Checks:
  - vision embeddings (--vision-out) and logits within 2e-3 relative to max|ref| (fp32 math with
    exactly widened weights: expected ~1e-6);
  - the token stream layout (start, N x image, end per image, in order; N = (H'/28)(W'/28));
  - placeholders, appended images, chunked prefill + decode from embeddings;
  - text weights of tiny-vl are the bytes of tiny (vision weights come from their own RNG stream);
  - a 640x480 image (MSA sparse), small-vl (vision head_dim 80 as in M3), the opt-in RoPE variant;
  - errors: --image without a vision tower, placeholder count mismatch, missing / mis-shaped tensor.
Env: M3_BIN, M3_SOURCE_DIR, M3_SCRATCH. Last line: "vision-reference: N passed, M failed".
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("M3_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "reference"))
import m3_reference as R  # noqa: E402
import m3_vision_reference as VR  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ.get("M3_SCRATCH", "/tmp/m3_vision_reference")
TOL = 2e-3
SEED = 11
passed, failed = 0, 0


def report(name, ok, detail=""):
    global passed, failed
    passed += ok
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def m3(*args, expect_ok=True):
    p = subprocess.run([M3, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if expect_ok and p.returncode != 0:
        raise RuntimeError(f"m3 {' '.join(args)} failed ({p.returncode}):\n{p.stdout}")
    return p


def rel(a, r):
    return float(np.abs(a - r).max() / max(float(np.abs(r).max()), 1e-30))


def make_image(path, w, h, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) * 255 // (w + h)], axis=2)
    img = np.clip(base + rng.integers(-40, 41, (h, w, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(img, "RGB").save(path)


def preprocess(path, tag):
    pv, grid = os.path.join(SCRATCH, f"{tag}_pv.npy"), os.path.join(SCRATCH, f"{tag}_grid.txt")
    m3("preprocess-image", path, "--out", pv, "--grid-out", grid)
    with open(grid) as f:
        g = tuple(int(v) for v in f.read().split())
    return np.load(pv), g


def rewrite_safetensors(src_dir, dst_dir, drop=None, reshape=None):
    """Copies a single-file checkpoint, hiding one tensor (renamed, so the data layout stays valid)
    or changing one tensor's header shape."""
    shutil.rmtree(dst_dir, ignore_errors=True)
    shutil.copytree(src_dir, dst_dir)
    path = os.path.join(dst_dir, "model.safetensors")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    if drop:
        header[drop + "_renamed"] = header.pop(drop)
    if reshape:
        header[reshape[0]]["shape"] = reshape[1]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    ck, ck_text = os.path.join(SCRATCH, "tiny_vl"), os.path.join(SCRATCH, "tiny")
    m3("make-checkpoint", "--preset", "tiny-vl", "--seed", str(SEED), "--out", ck)
    m3("make-checkpoint", "--preset", "tiny", "--seed", str(SEED), "--out", ck_text)

    # Text weights identical with and without the vision tower.
    a, b = R.Checkpoint(ck), R.Checkpoint(ck_text)
    text_names = [n for n in a.names() if n.startswith("language_model.")]
    same = text_names == b.names() and all(
        np.array_equal(a.get(n, dtype=np.float32), b.get(n, dtype=np.float32)) for n in text_names)
    report("tiny-vl text weights == tiny text weights", same, f"{len(text_names)} tensors")
    with open(os.path.join(ck, "config.json")) as f:
        cfg = json.load(f)
    tok = json.load(open(os.path.join(ck, "tokenizer.json")))
    ids_by_content = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    img_id = ids_by_content["]<]image[>["]
    start_id, end_id = ids_by_content["]<]start of image[>["], ids_by_content["]<]end of image[>["]
    report("config image_token_index from the tokenizer", cfg["image_token_index"] == img_id)

    # Images of odd sizes: 75x53 -> 84x56 (grid 1x4x6, 6 tokens); 41x100 -> 28x112 (grid 1x8x2, 4 tokens).
    imgs = [os.path.join(SCRATCH, "a.png"), os.path.join(SCRATCH, "b.png")]
    make_image(imgs[0], 75, 53, 1)
    make_image(imgs[1], 41, 100, 2)
    vref = VR.VisionReference(ck)
    ref_emb, counts = [], []
    for i, path in enumerate(imgs):
        pv, grid = preprocess(path, f"img{i}")
        e = vref.forward(pv, grid)
        report(f"image {i}: merged tokens = t*h*w/4", e.shape[0] == grid[0] * grid[1] * grid[2] // 4,
               f"grid {grid}, {e.shape[0]} tokens")
        ref_emb.append(e)
        counts.append(e.shape[0])
    text_ref = R.M3Reference(ck)

    def check_run(name, text, images, emb_rows, extra=()):
        out, vout, tout = (os.path.join(SCRATCH, f"{name}.{x}") for x in ("npy", "vis.npy", "ids.txt"))
        args = ["logits", "-m", ck, "--text", text, "--out", out, "--vision-out", vout, "--tokens-out", tout,
                "--cache-type", "f32", *extra]  # the reference keeps K/V in float64
        for p in images:
            args += ["--image", p]
        m3(*args)
        ids = [int(v) for v in open(tout).read().strip().split(",")]
        ve = np.load(vout)
        want = np.concatenate(emb_rows, axis=0)
        r = rel(ve, want)
        report(f"{name}: vision embeddings vs float64 reference", ve.shape == want.shape and r <= TOL,
               f"shape {list(ve.shape)}, rel err {r:.2e}")
        # Layout: each image is start, N x image, end, in order.
        ids_np = np.asarray(ids)
        pos = np.nonzero(ids_np == img_id)[0]
        ok = pos.size == sum(counts[imgs.index(p)] for p in images)
        at = 0
        for p in images:
            n = counts[imgs.index(p)]
            run = pos[at:at + n]
            ok = ok and run.size == n and np.all(np.diff(run) == 1) and ids[run[0] - 1] == start_id \
                and ids[run[-1] + 1] == end_id
            at += n
        report(f"{name}: token layout start + N image + end", bool(ok), f"{len(ids)} tokens, {pos.size} image")
        logits = np.load(out)
        ref, info = text_ref.forward(ids, embeddings_override=(pos, want), return_selection=True)
        # Smallest MSA selection margin (a near-tie could let fp32 noise pick another block).
        margins = [m[np.isfinite(m)] for m in info["margin"].values()]
        margin = min((float(m.min()) for m in margins if m.size), default=float("inf"))
        r = rel(logits, ref)
        report(f"{name}: logits vs float64 reference", logits.shape == ref.shape and r <= TOL,
               f"[{logits.shape[0]}, {logits.shape[1]}], rel err {r:.2e}, min MSA margin {margin:.2g}")
        return ids, logits

    _, ph_logits = check_run("placeholders", "Compare ]<]image[>[ with ]<]image[>[, please.", imgs, ref_emb)

    # m3 generate takes the same images: its greedy first token is the argmax of the last row of the
    # logits above (over the ids the tokenizer can decode).
    tok = json.load(open(os.path.join(ck, "tokenizer.json"), encoding="utf-8"))
    n_tok = max(max(tok["model"]["vocab"].values()), max(t["id"] for t in tok["added_tokens"])) + 1
    first = int(np.argmax(ph_logits[-1, :n_tok]))
    g = subprocess.run([M3, "generate", "-m", ck, "-p", "Compare ]<]image[>[ with ]<]image[>[, please.", "-n", "1",
                        "--ignore-eos", "--temp", "0", "--image", imgs[0], "--image", imgs[1]], capture_output=True, timeout=600)
    want_text = subprocess.run([M3, "tokenize", "-m", ck, "--decode", "--text", str(first)], capture_output=True,
                               timeout=60).stdout.decode("utf-8", errors="replace")
    got_text = g.stdout.decode("utf-8", errors="replace").rstrip("\n")
    report("generate --image: greedy token = argmax of the logits path", g.returncode == 0 and got_text == want_text,
           f"got {got_text!r}, want {want_text!r} (id {first}); {g.stderr.decode(errors='replace').strip()[-200:]}")
    ids, _ = check_run("appended", "What is in this picture?", [imgs[1]], [ref_emb[1]])
    check_run("appended_chunked", "What is in this picture?", [imgs[1]], [ref_emb[1]],
              extra=("--chunk", "5", "--decode-from", str(len(ids) - 4)))

    # A photo-sized image: 640x480 -> 644x476, 1,564 patches in one attention segment, 391 tokens.
    big = os.path.join(SCRATCH, "big.png")
    make_image(big, 640, 480, 3)
    imgs.append(big)
    pv, grid = preprocess(big, "big")
    ref_emb.append(vref.forward(pv, grid))
    counts.append(ref_emb[-1].shape[0])
    check_run("large", "]<]image[>[ Caption:", [big], [ref_emb[-1]])

    # small-vl: vision head_dim 80 as in M3 (3D RoPE 26/26/26 + 2 pass-through), text hidden 512.
    ck_small = os.path.join(SCRATCH, "small_vl")
    m3("make-checkpoint", "--preset", "small-vl", "--seed", str(SEED), "--out", ck_small)
    vs = VR.VisionReference(ck_small)
    report("small-vl vision head_dim 80", vs.vh // vs.heads == 80 and VR.rope_axis_dim(80) == 26)
    pv, grid = preprocess(imgs[0], "img0")
    want = vs.forward(pv, grid)
    out, vout, tout = (os.path.join(SCRATCH, f"small.{x}") for x in ("npy", "vis.npy", "ids.txt"))
    m3("logits", "-m", ck_small, "--text", "Look: ]<]image[>[", "--image", imgs[0], "--out", out,
       "--vision-out", vout, "--tokens-out", tout, "--cache-type", "f32")
    r = rel(np.load(vout), want)
    report("small-vl: vision embeddings vs float64 reference", r <= TOL, f"rel err {r:.2e}")
    ids = [int(v) for v in open(tout).read().strip().split(",")]
    pos = np.nonzero(np.asarray(ids) == img_id)[0]
    ref = R.M3Reference(ck_small).forward(ids, embeddings_override=(pos, want))
    r = rel(np.load(out), ref)
    report("small-vl: logits vs float64 reference", r <= TOL, f"{len(ids)} tokens, rel err {r:.2e}")

    # Opt-in RoPE variant (transformers port, 26/26/28 interleaved): engine vs reference, and it
    # really differs from the spec's variant.
    hf = VR.VisionReference(ck_small, "hf-interleaved").forward(pv, grid)
    m3("logits", "-m", ck_small, "--text", "Look: ]<]image[>[", "--image", imgs[0], "--out", out,
       "--vision-out", vout, "--vision-rope", "hf-interleaved")
    r = rel(np.load(vout), hf)
    report("small-vl --vision-rope hf-interleaved vs reference", r <= TOL and rel(hf, want) > 1e-2,
           f"rel err {r:.2e}, differs from the spec's variant by {rel(hf, want):.2e}")

    # Errors.
    def expect_error(name, args, needle):
        p = m3(*args, expect_ok=False)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        report(name, p.returncode != 0 and needle in p.stdout, last)

    lo = os.path.join(SCRATCH, "err.npy")
    expect_error("error: --image on a text-only checkpoint",
                 ["logits", "-m", ck_text, "--text", "hi", "--image", imgs[0], "--out", lo], "vision")
    expect_error("error: placeholder count mismatch",
                 ["logits", "-m", ck, "--text", "]<]image[>[", "--image", imgs[0], "--image", imgs[1], "--out", lo],
                 "placeholder")
    expect_error("error: unreadable image names the file",
                 ["logits", "-m", ck, "--text", "x", "--image", os.path.join(SCRATCH, "nope.png"), "--out", lo],
                 "nope.png")
    name = "vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias"
    bad = os.path.join(SCRATCH, "missing")
    rewrite_safetensors(ck, bad, drop=name)
    expect_error("error: missing vision tensor is named",
                 ["logits", "-m", bad, "--text", "x", "--image", imgs[0], "--out", lo], name)
    name = "vision_tower.vision_model.embeddings.patch_embedding.weight"
    vh = cfg["vision_config"]["hidden_size"]
    rewrite_safetensors(ck, bad, reshape=(name, [vh, 3, 2, 7, 28]))
    expect_error("error: mis-shaped vision tensor is named",
                 ["logits", "-m", bad, "--text", "x", "--image", imgs[0], "--out", lo], name)

    print(f"vision-reference: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
