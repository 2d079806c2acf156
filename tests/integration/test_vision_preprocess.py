#!/usr/bin/env python3
"""M3 image preprocessing: `m3 preprocess-image` against a NumPy + Pillow reference.

The reference follows vLLM's MiniMax-M3 path (spec §5.1): Pillow opens the file, applies the EXIF
orientation, converts to RGB (transparency composited onto white), smart_resize, Pillow
resize(BICUBIC), then rescale/normalise and patchify as the processor does.

Images of odd sizes and aspect ratios are written with Pillow (PNG, JPEG, BMP, GIF; RGB, RGBA, L,
LA, 1-bit, 16-bit, palette with and without transparency, EXIF orientations) and each case checks:
  - grid_thw equal;
  - decoded RGB equal (JPEG: equal with libjpeg-turbo, the library Pillow uses; with the
    stb_image fallback only bounded: mean |diff| <= 1.5 levels, reported);
  - resized uint8 image byte-for-byte equal to Pillow's resize (of our decoded image);
  - pixel_values bit-equal to the float32 arithmetic of the processor,
    (float32(v) - float32(mean)*255) / (float32(std)*255), and within 1e-6 of float64 (v/255-mean)/std.
Broken inputs must fail with exit 1 and a one-line error naming the file and the problem.
Env: M3_BIN, M3_SCRATCH. Last line: "vision-preprocess: N passed, M failed".
"""
import contextlib
import io
import math
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
from PIL import Image, ImageOps

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ.get("M3_SCRATCH", "/tmp/m3_vision_scratch")
os.makedirs(SCRATCH, exist_ok=True)

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
PATCH, MERGE, TEMPORAL = 14, 2, 2
passed, failed = 0, 0


def report(name, ok, detail=""):
    global passed, failed
    passed += ok
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


# ---- reference ------------------------------------------------------------------------------------

def ref_load(path):
    """Pillow + vLLM's convert_image_mode: EXIF transpose, then RGB with white under transparency."""
    im = Image.open(path)
    im.load()
    with contextlib.suppress(Exception):
        im = ImageOps.exif_transpose(im)
    if im.mode == "RGB":
        return im
    if im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info:
        if im.mode != "RGBA":
            im = im.convert("RGBA")
        out = Image.new("RGB", im.size, (255, 255, 255))
        out.paste(im, mask=im.split()[3])
        return out
    return im.convert("RGB")


def ref_smart_resize(h, w, min_pixels=3136, max_pixels=451584, max_long_side=None, factor=28):
    if max(h, w) / min(h, w) > 200:
        raise ValueError("aspect ratio")
    if max_long_side is not None:
        sh, sw = h, w
        if max(h, w) > max_long_side:
            beta = max_long_side / max(h, w)
            sh, sw = h * beta, w * beta
        elif min(h, w) < 112:
            beta = 112 / min(h, w)
            sh, sw = h * beta, w * beta
        return max(factor, round(sh / factor) * factor), max(factor, round(sw / factor) * factor)
    hb = max(factor, round(h / factor) * factor)
    wb = max(factor, round(w / factor) * factor)
    if hb * wb > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        hb, wb = math.floor(h / beta / factor) * factor, math.floor(w / beta / factor) * factor
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def ref_patchify(img):
    """uint8 [H, W, 3] -> (float64 pixel_values, float32 pixel_values, grid)."""
    h, w = img.shape[:2]
    v = img.astype(np.float64)
    x64 = (v / 255.0 - np.array(MEAN)) / np.array(STD)
    m32 = np.array(MEAN, np.float32) * np.float32(255)
    s32 = np.array(STD, np.float32) * np.float32(255)
    x32 = (img.astype(np.float32) - m32) / s32
    gh, gw = h // PATCH, w // PATCH

    def layout(x):
        frames = np.stack([x.transpose(2, 0, 1)] * TEMPORAL)  # an image is padded to 2 frames
        p = frames.reshape(1, TEMPORAL, 3, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
        p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)  # (t, bh, bw, sh, sw, c, tp, ph, pw)
        return p.reshape(gh * gw, 3 * TEMPORAL * PATCH * PATCH)

    return layout(x64), layout(x32), (1, gh, gw)


# ---- running m3 ------------------------------------------------------------------------------------

def run_m3(path, *flags):
    out = os.path.join(SCRATCH, "pv.npy")
    grid = os.path.join(SCRATCH, "grid.txt")
    cmd = [M3, "preprocess-image", path, "--out", out, "--grid-out", grid,
           "--resized-out", os.path.join(SCRATCH, "resized.npy"),
           "--decoded-out", os.path.join(SCRATCH, "decoded.npy"), *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return r, out, grid


def compare(name, path, flags=(), min_pixels=3136, max_pixels=451584, max_long_side=None):
    r, out, grid_path = run_m3(path, *flags)
    if r.returncode != 0:
        return report(name, False, f"m3 exit {r.returncode}: {r.stderr.strip()}")
    decoder = "libjpeg-turbo" if "jpeg decoder: libjpeg-turbo" in r.stdout else "stb_image"
    decoded = np.load(os.path.join(SCRATCH, "decoded.npy")).astype(np.uint8)
    resized = np.load(os.path.join(SCRATCH, "resized.npy")).astype(np.uint8)
    pv = np.load(out)
    grid = tuple(int(v) for v in open(grid_path).read().split())

    ref_img = np.asarray(ref_load(path))
    problems, notes = [], []
    is_jpeg = open(path, "rb").read(3) == b"\xff\xd8\xff"
    if decoded.shape != ref_img.shape:
        return report(name, False, f"decoded shape {decoded.shape} != Pillow {ref_img.shape}")
    dec_diff = np.abs(decoded.astype(int) - ref_img)
    if is_jpeg and decoder == "stb_image":
        # Not libjpeg: compare the rest against Pillow's processing of *our* pixels.
        notes.append(f"stb JPEG decode vs Pillow: max {dec_diff.max()}, mean {dec_diff.mean():.3f}")
        if dec_diff.mean() > 1.5:
            problems.append("JPEG decode too far from Pillow")
        ref_img = decoded
    elif dec_diff.max() != 0:
        problems.append(f"decoded differs from Pillow at {int((dec_diff > 0).sum())} values, max {dec_diff.max()}")

    h, w = ref_img.shape[:2]
    rh, rw = ref_smart_resize(h, w, min_pixels, max_pixels, max_long_side)
    ref_resized = np.asarray(Image.fromarray(ref_img).resize((rw, rh), Image.BICUBIC))
    if resized.shape != ref_resized.shape:
        return report(name, False, f"resized {resized.shape} != reference {ref_resized.shape}")
    rdiff = np.abs(resized.astype(int) - ref_resized)
    if rdiff.max() != 0:
        problems.append(f"resized differs from Pillow at {int((rdiff > 0).sum())} values, max {rdiff.max()}")

    pv64, pv32, ref_grid = ref_patchify(ref_resized)
    if grid != ref_grid:
        problems.append(f"grid {grid} != {ref_grid}")
    if pv.shape != pv64.shape:
        problems.append(f"pixel_values shape {pv.shape} != {pv64.shape}")
    else:
        err64 = np.abs(pv.astype(np.float64) - pv64).max()
        bits = int((pv.view(np.uint32) != pv32.view(np.uint32)).sum())
        if err64 > 1e-6:
            problems.append(f"max |pixel_values - float64 reference| = {err64:.2e} > 1e-6")
        if bits:
            problems.append(f"{bits} pixel_values differ from the float32 processor arithmetic")
    detail = f"{w}x{h} -> {rw}x{rh}, grid {grid}"
    report(name, not problems, "; ".join(problems + notes) if problems or notes else detail)


def expect_error(name, path, keywords, flags=()):
    r, _, _ = run_m3(path, *flags)
    err = r.stderr.strip()
    ok = r.returncode == 1 and err.startswith("m3: error:") and path in err and all(k in err for k in keywords)
    ok = ok and len(err.splitlines()) == 1
    report(name, ok, err if ok else f"exit {r.returncode}, stderr {err!r}, wanted {keywords}")


# ---- test images -------------------------------------------------------------------------------------

rng = np.random.default_rng(20261)


def noise(h, w, c=3):
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


def photo(h, w):
    """Smooth content with texture: what JPEG is made for, and where resampling rounding shows."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 90 * np.sin(x / (9.0 + c) + c) * np.cos(y / 13.0 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def save(img, name, **kw):
    path = os.path.join(SCRATCH, name)
    img.save(path, **kw)
    return path


def png_bytes(w, h, color_type, bit_depth, raw_rows):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw_rows))
            + chunk(b"IEND", b""))


def gif_partial_frame(transparent, global_palette):
    """An 8x6 GIF whose first (only) frame covers 3x2 pixels at (2, 1): what fills the rest?"""
    pal = bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9])
    screen = struct.pack("<HHBBB", 8, 6, 0x81 if global_palette else 0, 3, 0) + (pal if global_palette else b"")
    gce = bytes([0x21, 0xF9, 4, 1 if transparent else 0, 0, 0, 2, 0])
    desc = b"\x2c" + struct.pack("<HHHHB", 2, 1, 3, 2, 0 if global_palette else 0x81) + (b"" if global_palette else pal)
    codes = []
    for index in [0, 1, 2, 1, 0, 3]:
        codes += [4, index]  # clear code before each pixel keeps the code width at 3 bits
    codes.append(5)
    acc = nbits = 0
    lzw = bytearray()
    for c in codes:
        acc |= c << nbits
        nbits += 3
        while nbits >= 8:
            lzw.append(acc & 255)
            acc >>= 8
            nbits -= 8
    if nbits:
        lzw.append(acc & 255)
    return b"GIF89a" + screen + gce + desc + bytes([2, len(lzw)]) + bytes(lzw) + b"\0;"


def write(name, data):
    path = os.path.join(SCRATCH, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def main():
    r = subprocess.run([M3, "--help"], capture_output=True, text=True)
    if "preprocess-image" not in r.stdout:
        print(f"{M3} has no preprocess-image subcommand (register_preprocess not called in tools/m3/main.cpp)")
        print("vision-preprocess: 0 passed, 1 failed")
        return 1

    # Sizes: tiny, extreme but allowed aspect ratios (200:1), odd, around the token bounds.
    for (w, h) in [(1, 1), (3, 600), (600, 3), (100, 37), (37, 100), (28, 28), (29, 27), (70, 70),
                   (640, 480), (673, 673), (1920, 1080)]:
        img = noise(h, w) if w * h < 100000 else photo(h, w)
        compare(f"png rgb {w}x{h}", save(Image.fromarray(img), f"rgb_{w}x{h}.png"))

    # Random sizes and bounds: many scale factors up and down, both passes and one-pass cases.
    for i in range(12):
        w, h = int(rng.integers(1, 700)), int(rng.integers(1, 700))
        if max(w, h) > 200 * min(w, h):
            continue
        max_px = int(rng.choice([451584, 100000, 20000, 1000000]))
        min_px = int(rng.choice([3136, 50000]))
        if min_px > max_px:
            min_px = 3136
        compare(f"png random {w}x{h} min {min_px} max {max_px}",
                save(Image.fromarray(noise(h, w)), f"rand_{i}.png"),
                ("--max-pixels", str(max_px), "--min-pixels", str(min_px)), min_px, max_px)

    compare("long-side mode 1500x700 max 1008", save(Image.fromarray(photo(700, 1500)), "long.png"),
            ("--max-long-side", "1008"), max_long_side=1008)
    compare("long-side mode 90x300 enlarges short side", save(Image.fromarray(noise(300, 90)), "long2.png"),
            ("--max-long-side", "1008"), max_long_side=1008)

    # Modes.
    rgba = np.concatenate([noise(77, 123), rng.integers(0, 256, (77, 123, 1), dtype=np.uint8)], -1)
    rgba[0, :10, 3] = 0
    rgba[1, :10, 3] = 255
    compare("png rgba (composited on white)", save(Image.fromarray(rgba, "RGBA"), "rgba.png"))
    compare("png gray", save(Image.fromarray(noise(91, 55, 1)[..., 0], "L"), "gray.png"))
    compare("png gray+alpha", save(Image.fromarray(noise(40, 64, 2), "LA"), "la.png"))
    compare("png 1-bit", save(Image.fromarray(noise(33, 47, 1)[..., 0] > 127), "bit.png"))
    pal = Image.fromarray(photo(61, 97)).convert("P", palette=Image.ADAPTIVE, colors=64)
    compare("png palette", save(pal, "pal.png"))
    compare("png palette + transparency", save(pal, "pal_t.png", transparency=3))
    compare("png palette 4-bit", save(Image.fromarray(photo(45, 50)).convert("P", palette=Image.ADAPTIVE, colors=16),
                                      "pal4.png", bits=4))
    key = noise(30, 40)
    key[:5, :5] = (10, 20, 30)
    compare("png rgb + tRNS key (not composited, as vLLM)", save(Image.fromarray(key), "rgb_trns.png",
                                                                  transparency=(10, 20, 30)))
    g = noise(30, 40, 1)[..., 0]
    g[:4] = 77
    compare("png gray + tRNS key (composited)", save(Image.fromarray(g, "L"), "gray_trns.png", transparency=77))
    g16 = rng.integers(0, 600, (31, 29)).astype(">u2")  # Pillow clips levels > 255 to white
    compare("png 16-bit gray (Pillow clips at 255)",
            write("gray16.png", png_bytes(29, 31, 0, 16, b"".join(b"\0" + r.tobytes() for r in g16))))
    c16 = rng.integers(0, 65536, (17, 23, 3)).astype(">u2")
    compare("png 16-bit rgb", write("rgb16.png", png_bytes(23, 17, 2, 16, b"".join(b"\0" + r.tobytes() for r in c16))))

    # EXIF orientation (PNG eXIf chunk, lossless so the check is exact).
    base = Image.fromarray(noise(50, 90))
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        compare(f"png exif orientation {o}", save(base, f"exif_{o}.png", exif=exif.tobytes()))

    # JPEG: chroma subsampling 4:4:4, 4:2:2, 4:2:0, progressive, gray, CMYK, EXIF rotation.
    ph = Image.fromarray(photo(333, 517))
    for ss, label in [(0, "4:4:4"), (1, "4:2:2"), (2, "4:2:0")]:
        compare(f"jpeg {label}", save(ph, f"ph_{ss}.jpg", quality=90, subsampling=ss))
    compare("jpeg progressive", save(ph, "prog.jpg", quality=85, progressive=True))
    compare("jpeg gray", save(ph.convert("L"), "gray.jpg", quality=90))
    compare("jpeg cmyk", save(ph.convert("CMYK"), "cmyk.jpg", quality=90))
    exif = Image.Exif()
    exif[0x0112] = 6
    compare("jpeg exif orientation 6", save(ph, "exif6.jpg", quality=90, exif=exif.tobytes()))

    # BMP and GIF.
    compare("bmp rgb", save(Image.fromarray(noise(45, 67)), "rgb.bmp"))
    compare("bmp palette", save(pal, "pal.bmp"))
    compare("bmp gray", save(Image.fromarray(noise(45, 67, 1)[..., 0], "L"), "gray.bmp"))
    compare("gif", save(pal, "pal.gif"))
    compare("gif + transparency", save(pal, "pal_t.gif", transparency=5))
    for transparent in (False, True):
        for gct in (False, True):
            compare(f"gif partial first frame, transparency {transparent}, global palette {gct}",
                    write(f"partial_{transparent}_{gct}.gif", gif_partial_frame(transparent, gct)))
    frames = [Image.fromarray(noise(40, 50)).convert("P", palette=Image.ADAPTIVE) for _ in range(3)]
    compare("gif animated (first frame)", save(frames[0], "anim.gif", save_all=True, append_images=frames[1:]))
    compare("bmp 32-bit (alpha ignored, as Pillow)", save(Image.fromarray(noise(20, 30, 4), "RGBA"), "rgba.bmp"))

    # Errors: exit 1, one line, the file and the problem named.
    good_png = open(os.path.join(SCRATCH, "rgb_640x480.png"), "rb").read()
    good_jpg = open(os.path.join(SCRATCH, "ph_2.jpg"), "rb").read()
    expect_error("error: corrupt png", write("corrupt.png", good_png[:60] + bytes(rng.integers(0, 256, 4000, dtype=np.uint8))), ["corrupt"])
    expect_error("error: truncated png", write("trunc.png", good_png[: len(good_png) * 3 // 5]), ["PNG"])
    expect_error("error: truncated jpeg", write("trunc.jpg", good_jpg[: len(good_jpg) // 2]), ["truncated"])
    expect_error("error: unsupported tiff", save(Image.fromarray(noise(8, 8)), "x.tiff"), ["unsupported image format"])
    expect_error("error: not an image", write("text.png", b"hello, world\n"), ["unsupported image format"])
    expect_error("error: empty file", write("empty.png", b""), ["empty"])
    expect_error("error: missing file", os.path.join(SCRATCH, "does_not_exist.png"), ["cannot open"])
    expect_error("error: zero-size png", write("zero.png", png_bytes(0, 5, 2, 8, b"")), ["zero-size"])
    expect_error("error: aspect ratio 201", save(Image.fromarray(noise(1, 201)), "wide.png"), ["aspect ratio", "200"])
    expect_error("error: header says 20000x20000",
                 write("bomb.png", png_bytes(20000, 20000, 0, 8, b"\0" * 20001)), ["20000x20000", "limit"])
    expect_error("error: --max-decode-pixels", os.path.join(SCRATCH, "rgb_640x480.png"), ["640x480", "limit of 1000"],
                 ("--max-decode-pixels", "1000"))

    print(f"vision-preprocess: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
