#!/usr/bin/python3
"""Videos through the engine vs the float64 NumPy references (spec §5.2-§5.5).

Test clips are written here by `m3 make-video` (FFmpeg's encoders in-process; frame i's left half is
a flat colour encoding i): 3.5 s at 10 fps as MP4/H.264, WebM/VP9 and an animated GIF. Python has no
FFmpeg, so `m3 preprocess-video --frames-out` dumps the decoded sampled frames; from them the reference
(tests/reference/m3_vision_reference.py) redoes the sampling arithmetic, the Pillow bicubic resize,
normalisation, temporal padding and patchify, runs the vision tower (segments of <= 4 temporal groups,
t restarting per segment), and m3_reference.py runs the text model with the video rows overridden.
Checks:
  - sampled indices and timestamps equal the spec's rule (0,10,20,30 at 1 fps; 12 frames at 4 fps;
    5 frames, padded to 6, at 1.5 fps); each decoded frame shows its own index colour;
  - pixel_values equal the Pillow/NumPy preprocessing of the decoded frames;
  - the token stream: per temporal group the timestamp text (tokenized as text), start, M x video, end;
  - vision embeddings and logits within 2e-3 relative to max|ref| (fp32: expected ~1e-6), for one
    segment, two segments (grid_t 6, where ignoring segments changes the result), a padded clip, and a
    prompt mixing an image and two videos placed by placeholders; generate --video agrees with logits;
  - corrupt, truncated and oversized files: one-line error naming the file, exit 1.
Env: M3_BIN, M3_SOURCE_DIR, M3_SCRATCH. Last line: "video-reference: N passed, M failed".
"""
import json
import os
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
SCRATCH = os.environ.get("M3_SCRATCH", "/tmp/m3_video_reference")
TOL = 2e-3
passed, failed = 0, 0


def report(name, ok, detail=""):
    global passed, failed
    passed += bool(ok)
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def m3(*args, expect_ok=True):
    p = subprocess.run([M3, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if expect_ok and p.returncode != 0:
        raise RuntimeError(f"m3 {' '.join(args)} failed ({p.returncode}):\n{p.stdout}")
    return p


def rel(a, r):
    return float(np.abs(a - r).max() / max(float(np.abs(r).max()), 1e-30))


def clip_color(i):
    return np.array([(i % 6) * 51, ((i // 6) % 6) * 51, ((i // 36) % 6) * 51], np.float64)


def scratch(name):
    return os.path.join(SCRATCH, name)


def preprocess(path, tag, fps=1.0):
    js, fr, pv = scratch(f"{tag}.json"), scratch(f"{tag}_frames.npy"), scratch(f"{tag}_pv.npy")
    m3("preprocess-video", path, "--fps", str(fps), "--json", js, "--frames-out", fr, "--out", pv)
    with open(js) as f:
        info = json.load(f)
    return info, np.load(fr), np.load(pv)


def token_ids(ck, text):
    out = m3("tokenize", "-m", ck, "--text", text).stdout.strip()
    return [int(v) for v in out.split(",")] if out else []


def check_token_table():
    """docs/VISION_TOKENS.md's video table == `m3 video-tokens`, and every row == the Python formulas."""
    doc = open(os.path.join(SOURCE_DIR, "docs", "VISION_TOKENS.md"), encoding="utf-8").read()
    a, b = "<!-- video-tokens table begin -->\n", "<!-- video-tokens table end -->"
    table = doc[doc.index(a) + len(a):doc.index(b)]
    out = m3("video-tokens").stdout
    report("docs/VISION_TOKENS.md video table == m3 video-tokens", table == out,
           f"{len(out.splitlines()) - 2} rows" if table == out else "regenerate the table with m3 video-tokens")
    bad = []
    for line in out.splitlines()[2:]:
        c = [x.strip() for x in line.strip("|").split("|")]
        w, h = (int(v) for v in c[0].split("×"))
        dur, fps = float(c[1]), float(c[2])
        idx = VR.sample_frame_indices(round(dur * 30), 30.0, fps=fps)
        rh, rw = VR.video_smart_resize(h, w, len(idx))
        t = -(-len(idx) // 2)
        tokens = t * (rh // 28) * (rw // 28)
        want = [c[0], c[1], c[2], str(len(idx)), f"{rw}×{rh}", f"{t}, {rh // 14}, {rw // 14}", f"{tokens:,}",
                f"{tokens + 2 * t:,}"]
        if c != want:
            bad.append(f"{c} != {want}")
    report("video token table rows == spec formulas (Python)", not bad, "; ".join(bad[:3]))


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    ck = scratch("tiny_vl")
    m3("make-checkpoint", "--preset", "tiny-vl", "--seed", "5", "--out", ck)
    tok = json.load(open(os.path.join(ck, "tokenizer.json"), encoding="utf-8"))
    by_content = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vid_id, img_id = by_content["]<]video[>["], by_content["]<]image[>["]
    start_id, end_id = by_content["]<]start of image[>["], by_content["]<]end of image[>["]

    clips = {}
    for ext, enc, tol in (("mp4", "libx264", 8), ("webm", "libvpx-vp9", 10), ("gif", "gif", 45)):
        path = scratch(f"clip.{ext}")
        p = m3("make-video", path, "--encoder", enc, "--width", "96", "--height", "64", "--frames", "35", "--fps", "10",
               expect_ok=False)
        if p.returncode != 0:
            report(f"{ext}: encoder {enc} available", False, p.stdout.strip())
            continue
        clips[ext] = path
        # Sampling, timestamps, decoded content, pixel_values, for three sampling rates.
        for fps, want_idx in ((1.0, [0, 10, 20, 30]), (4.0, list(range(0, 35, 3))), (1.5, [0, 7, 14, 21, 28])):
            info, frames, pv = preprocess(path, f"{ext}_{fps}", fps)
            idx = info["indices"]
            ref_idx = VR.sample_frame_indices(info["frames"], info["fps"], fps=fps)
            ts = VR.group_timestamps(idx, info["fps"])
            ok = idx == want_idx == ref_idx and info["frames"] == 35 and abs(info["fps"] - 10) < 1e-9 \
                and info["timestamp_texts"] == [VR.timestamp_text(t) for t in ts]
            report(f"{ext} @ {fps} fps: indices and timestamps", ok,
                   f"{idx}, {info['timestamp_texts']}")
            # Left-half interior of each decoded frame is its index colour.
            errs = [float(np.abs(f[8:-8, 8:40].reshape(-1, 3).mean(0) - clip_color(i)).max()) for f, i in zip(frames, idx)]
            report(f"{ext} @ {fps} fps: decoded frames show their index colour", max(errs) <= tol,
                   f"max colour error {max(errs):.1f} (tolerance {tol})")
            ref_pv, grid = VR.preprocess_video_frames(frames)
            d = float(np.abs(pv - ref_pv).max()) if pv.shape == ref_pv.shape else float("inf")
            report(f"{ext} @ {fps} fps: pixel_values == Pillow/NumPy preprocessing", d <= 1e-5 and
                   list(grid) == info["grid_thw"], f"grid {info['grid_thw']}, max |diff| {d:.1e}")

    if "mp4" not in clips:
        print(f"video-reference: {passed} passed, {failed + 1} failed (no MP4 clip)")
        return 1
    vref = VR.VisionReference(ck)
    tref = R.M3Reference(ck)
    img = scratch("still.png")
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (53, 75, 3), dtype=np.uint8), "RGB").save(img)

    def video_expect(path, fps, tag):
        info, frames, _ = preprocess(path, tag, fps)
        ref_pv, grid = VR.preprocess_video_frames(frames)
        emb = vref.forward(ref_pv, grid)
        ts = VR.group_timestamps(info["indices"], info["fps"])
        return emb, grid, ts, ref_pv

    def image_expect(path):
        pv_path, grid_path = scratch("still_pv.npy"), scratch("still_grid.txt")
        m3("preprocess-image", path, "--out", pv_path, "--grid-out", grid_path)
        grid = tuple(int(v) for v in open(grid_path).read().split())
        return vref.forward(np.load(pv_path), grid)

    def run(name, text, media, extra=()):
        """media: list of (kind, path, fps, expected embedding, timestamps) in stream order."""
        out, vout, tout = scratch(f"{name}.npy"), scratch(f"{name}.vis.npy"), scratch(f"{name}.ids.txt")
        args = ["logits", "-m", ck, "--text", text, "--out", out, "--vision-out", vout, "--tokens-out", tout,
                "--cache-type", "f32", *extra]  # the reference keeps K/V in float64
        for kind, path, *_ in media:
            args += [f"--{kind}", path]
        m3(*args)
        ids = [int(v) for v in open(tout).read().strip().split(",")]
        want = np.concatenate([m[3] for m in media], axis=0)
        ve = np.load(vout)
        r = rel(ve, want) if ve.shape == want.shape else float("inf")
        report(f"{name}: vision embeddings vs float64 reference", r <= TOL, f"shape {list(ve.shape)}, rel err {r:.2e}")
        # Layout: every item in order; a video group = timestamp text, start, M x video, end.
        at, ok, rows = 0, True, []
        ids_np = np.asarray(ids)
        for kind, path, fps, emb, ts in media:
            if kind == "image":
                s = int(np.nonzero(ids_np[at:] == start_id)[0][0]) + at
                n = emb.shape[0]
                ok = ok and all(ids[s + 1 + k] == img_id for k in range(n)) and ids[s + 1 + n] == end_id
                rows += list(range(s + 1, s + 1 + n))
                at = s + n + 2
                continue
            m = emb.shape[0] // len(ts)
            for t in ts:
                want_ts = token_ids(ck, VR.timestamp_text(t))
                s = int(np.nonzero(ids_np[at:] == start_id)[0][0]) + at
                ok = ok and ids[s - len(want_ts):s] == want_ts and ids[s + 1 + m] == end_id \
                    and all(ids[s + 1 + k] == vid_id for k in range(m))
                rows += list(range(s + 1, s + 1 + m))
                at = s + m + 2
        placeholders = int(np.sum((ids_np == vid_id) | (ids_np == img_id)))
        report(f"{name}: token layout (timestamps, start, M x video, end)", ok and placeholders == len(rows),
               f"{len(ids)} tokens, {placeholders} vision rows")
        logits = np.load(out)
        ref = tref.forward(ids, embeddings_override=(np.asarray(rows), want))
        r = rel(logits, ref)
        report(f"{name}: logits vs float64 reference", logits.shape == ref.shape and r <= TOL,
               f"[{logits.shape[0]}, {logits.shape[1]}], rel err {r:.2e}")
        return ids, logits

    mp4 = clips["mp4"]
    e1, g1, ts1, _ = video_expect(mp4, 1.0, "mp4_ref1")
    ids, logits = run("mp4 placeholder", "What happens in ]<]video[>[ ?", [("video", mp4, 1.0, e1, ts1)])
    report("mp4: grid_thw (2, 4, 6), timestamps 0.0 / 2.0 s", g1 == (2, 4, 6) and ts1 == [0.0, 2.0], f"{g1} {ts1}")

    # Two segments (grid_t 6 > vision_segment_max_frames 4): t restarts in the second; the reference
    # without segments differs, so the check can fail.
    e4, g4, ts4, pv4 = video_expect(mp4, 4.0, "mp4_ref4")
    run("mp4 @ 4 fps, two segments", "Summarize:", [("video", mp4, 4.0, e4, ts4)], extra=("--video-fps", "4"))
    whole = VR.VisionReference(ck, segment_max_frames=1000).forward(pv4, g4)
    report("segments matter (one 6-group segment differs)", rel(whole, e4) > 1e-3, f"differs by {rel(whole, e4):.2e}")

    if "gif" in clips:  # odd frame count: last frame repeated; chunked prefill + decode from embeddings
        eg, gg, tsg, _ = video_expect(clips["gif"], 1.5, "gif_ref")
        ids_g, _ = run("gif @ 1.5 fps, padded", "]<]video[>[ What moves?", [("video", clips["gif"], 1.5, eg, tsg)],
                       extra=("--video-fps", "1.5"))
        run("gif chunked + decode", "]<]video[>[ What moves?", [("video", clips["gif"], 1.5, eg, tsg)],
            extra=("--video-fps", "1.5", "--chunk", "7", "--decode-from", str(len(ids_g) - 3)))

    # Mixed: an image and two videos, each kind placed by its own placeholders.
    ei = image_expect(img)
    media = [("video", mp4, 1.0, e1, ts1), ("image", img, 0, ei, None)]
    if "webm" in clips:
        ew, _, tsw, _ = video_expect(clips["webm"], 1.0, "webm_ref")
        media.append(("video", clips["webm"], 1.0, ew, tsw))
        text = "First ]<]video[>[ then ]<]image[>[ and ]<]video[>[."
    else:
        text = "First ]<]video[>[ then ]<]image[>[."
    mixed_ids, mixed_logits = run("mixed image + videos", text, media)

    # small-vl: vision head_dim 80 as in M3 (RoPE 26/26/26 + 2), two segments at 4 fps.
    ck_s = scratch("small_vl")
    m3("make-checkpoint", "--preset", "small-vl", "--seed", "5", "--out", ck_s)
    vs = VR.VisionReference(ck_s)
    _, _, _, pv4s = video_expect(mp4, 4.0, "mp4_small")
    want_s = vs.forward(pv4s, g4)
    out_s, vout_s, tout_s = scratch("small.npy"), scratch("small.vis.npy"), scratch("small.ids.txt")
    m3("logits", "-m", ck_s, "--text", "]<]video[>[ Describe.", "--video", mp4, "--video-fps", "4", "--out", out_s,
       "--vision-out", vout_s, "--tokens-out", tout_s, "--cache-type", "f32")
    r = rel(np.load(vout_s), want_s)
    report("small-vl @ 4 fps: vision embeddings vs float64 reference", r <= TOL, f"rel err {r:.2e}")
    ids_s = [int(v) for v in open(tout_s).read().strip().split(",")]
    pos = np.nonzero(np.asarray(ids_s) == vid_id)[0]
    ref_s = R.M3Reference(ck_s).forward(ids_s, embeddings_override=(pos, want_s))
    r = rel(np.load(out_s), ref_s)
    report("small-vl @ 4 fps: logits vs float64 reference", r <= TOL, f"{len(ids_s)} tokens, rel err {r:.2e}")

    # generate --video: the greedy first token is the argmax of the last logits row.
    n_tok = max(max(tok["model"]["vocab"].values()), max(t["id"] for t in tok["added_tokens"])) + 1
    first = int(np.argmax(logits[-1, :n_tok]))
    g = subprocess.run([M3, "generate", "-m", ck, "-p", "What happens in ]<]video[>[ ?", "-n", "1", "--ignore-eos", "--temp", "0",
                        "--video", mp4], capture_output=True, timeout=600)
    want_text = subprocess.run([M3, "tokenize", "-m", ck, "--decode", "--text", str(first)], capture_output=True,
                               timeout=60).stdout.decode("utf-8", errors="replace")
    got = g.stdout.decode("utf-8", errors="replace").rstrip("\n")
    report("generate --video: greedy token = argmax of the logits path", g.returncode == 0 and got == want_text,
           f"got {got!r}, want {want_text!r}")

    # Errors: one line naming the file, exit 1.
    def expect_error(name, path, needle):
        p = m3("logits", "-m", ck, "--text", "x", "--video", path, "--out", scratch("err.npy"), expect_ok=False)
        lines = p.stdout.strip().splitlines()
        last = lines[-1] if lines else ""
        report(name, p.returncode == 1 and last.startswith("m3: error: " + path) and needle in last, last)

    junk = scratch("junk.mp4")
    with open(junk, "wb") as f:
        f.write(bytes(rng.integers(0, 256, 5000, dtype=np.uint8)))
    expect_error("error: corrupt video", junk, "not a readable video")
    data = open(mp4, "rb").read()
    cut = scratch("cut.mp4")
    with open(cut, "wb") as f:
        f.write(data[:len(data) // 2])
    expect_error("error: truncated MP4", cut, "truncated")
    if "webm" in clips:
        data = open(clips["webm"], "rb").read()
        cutw = scratch("cut.webm")
        with open(cutw, "wb") as f:
            f.write(data[:len(data) // 2])
        expect_error("error: truncated WebM", cutw, "truncated")
    expect_error("error: missing file", scratch("nope.mp4"), "no such file")
    big = scratch("big.mkv")
    if m3("make-video", big, "--encoder", "ffv1", "--width", "8200", "--height", "8200", "--frames", "1",
          expect_ok=False).returncode == 0:
        expect_error("error: oversized frames", big, "more than the limit")
        os.remove(big)
    p = m3("logits", "-m", ck, "--text", "]<]video[>[ ]<]video[>[", "--video", mp4, "--out", scratch("e.npy"),
           expect_ok=False)
    report("error: video placeholder count mismatch", p.returncode == 1 and "placeholder" in p.stdout,
           p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "")

    check_token_table()
    print(f"video-reference: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
