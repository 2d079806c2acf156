#!/usr/bin/env python3
"""Image and video parts in `m3 serve` chat requests (tiny-vl checkpoint, Pillow-made PNG/JPEG
images, an H.264 clip made by `m3 make-video`).

Checks: a data: URL image is accepted and expands to start + N image tokens + end (prompt_tokens);
a warm server reusing the cached image equals a cold server bit for bit; a different image with the
same text does not reuse the first image's rows (cached_tokens stops before them) and changes the
logits; local paths work only under --allowed-local-media-path; bad images, bad base64, remote URLs
and paths outside the folder are 400s naming messages[i].content[j]; a video part expands to its
temporal groups (timestamp text + start + M video tokens + end each, as `m3 preprocess-video` says),
mixes with an image in one message, is reused from the cache exactly, and a corrupt clip is a 400;
the server keeps serving.
"""
import base64
import io
import json
import os
import subprocess
import sys

from PIL import Image

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-images")



def image_bytes(w, h, seed, fmt="PNG"):
    img = Image.new("RGB", (w, h))
    img.putdata([((x * 7 + seed * 31) % 256, (y * 5 + seed * 17) % 256, ((x + y) * 3 + seed) % 256)
                 for y in range(h) for x in range(w)])
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def data_url(b, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(b).decode()


def request(url, text="Describe the picture."):
    return {"model": "tiny-vl", "temperature": 0, "max_tokens": 6, "logprobs": True, "top_logprobs": 3,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text},
                                                      {"type": "image_url", "image_url": {"url": url}}]}]}


model = os.path.join(SCRATCH, "tiny-vl")
server_client.make_checkpoint(M3, "tiny-vl", 4, model)
media_dir = os.path.join(SCRATCH, "media")
os.makedirs(media_dir, exist_ok=True)
a = image_bytes(75, 53, 1)
b = image_bytes(75, 53, 2)
with open(os.path.join(media_dir, "a.png"), "wb") as f:
    f.write(a)
with open(os.path.join(SCRATCH, "outside.png"), "wb") as f:
    f.write(a)

warm_proc, warm = server_client.start_server(
    M3, model, ["-t", "2", "--parallel", "2", "--allowed-local-media-path", media_dir], os.path.join(SCRATCH, "warm.log"))
cold_proc, cold = server_client.start_server(M3, model, ["-t", "2", "--cache-mb", "0"], os.path.join(SCRATCH, "cold.log"))
try:
    text_only = {"model": "tiny-vl", "max_tokens": 1, "messages": [{"role": "user", "content": "Describe the picture."}]}
    st, t = server_client.post_chat(warm, text_only)
    st1, r1 = server_client.post_chat(warm, request(data_url(a)))
    check(st == 200 and st1 == 200, f"text-only and data: URL image requests answered ({st}, {st1})")
    # 75x53 -> smart_resize 84x56 -> (84/28)*(56/28) = 6 merged tokens; the part's one placeholder
    # becomes start + 6 + end.
    if st1 == 200 and st == 200:
        added = r1["usage"]["prompt_tokens"] - t["usage"]["prompt_tokens"]
        check(added == 6 + 2, f"the image adds start + 6 image tokens + end ({added} tokens)")

    st2, r2 = server_client.post_chat(warm, request(data_url(a)))
    stc, rc = server_client.post_chat(cold, request(data_url(a)))
    check(st2 == 200 and r2["usage"]["prompt_tokens_details"]["cached_tokens"] == r2["usage"]["prompt_tokens"] - 1,
          f"same image again: everything but the last prompt token reused ({r2['usage'] if st2 == 200 else r2})")
    check(stc == 200 and r2["choices"][0]["logprobs"] == rc["choices"][0]["logprobs"]
          and r1["choices"][0]["logprobs"] == rc["choices"][0]["logprobs"],
          "log-probabilities with the cached image equal a cold server's")

    st3, r3 = server_client.post_chat(warm, request(data_url(b)))
    cached3 = r3["usage"]["prompt_tokens_details"]["cached_tokens"] if st3 == 200 else -1
    check(st3 == 200 and 0 < cached3 <= r3["usage"]["prompt_tokens"] - 8,
          f"a different image reuses only the text before it (cached {cached3} of {r3['usage']['prompt_tokens'] if st3 == 200 else '?'})")
    check(st3 == 200 and r3["choices"][0]["logprobs"] != r1["choices"][0]["logprobs"], "a different image changes the logits")

    st4, r4 = server_client.post_chat(warm, request(os.path.join(media_dir, "a.png")))
    check(st4 == 200 and r4["choices"][0]["logprobs"] == r1["choices"][0]["logprobs"],
          "a local path under --allowed-local-media-path gives the same answer as the data: URL")
    st5, r5 = server_client.post_chat(warm, request("file://" + os.path.join(media_dir, "a.png")))
    check(st5 == 200, "file:// URL under the allowed folder")

    jpeg = image_bytes(40, 90, 3, "JPEG")
    st6, _ = server_client.post_chat(warm, request(data_url(jpeg, "image/jpeg")))
    check(st6 == 200, "JPEG data URL")

    bad = [
        (request("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA"), "truncated PNG"),
        (request("data:image/png;base64,@@@@"), "invalid base64"),
        (request("data:image/png,rawbytes"), "data URL without ;base64"),
        (request("https://example.com/cat.png"), "remote URL"),
        (request(os.path.join(SCRATCH, "outside.png")), "path outside the allowed folder"),
        (request(os.path.join(media_dir, "..", "outside.png")), "path escaping with .."),
        (request(os.path.join(media_dir, "missing.png")), "missing file"),
        (request(data_url(b"not an image at all")), "bytes that are no image"),
    ]
    for body, what in bad:
        st, r = server_client.post_chat(warm, body)
        param = r.get("error", {}).get("param")
        check(st == 400 and param == "messages[0].content[1]", f"{what}: 400 naming {param} ({r.get('error', {}).get('message', '')[:80]})")
    # Video: a 3.5 s clip at 10 fps -> frames 0, 10, 20, 30 -> 2 temporal groups of 6 tokens.
    clip = os.path.join(SCRATCH, "clip.mp4")
    subprocess.run([M3, "make-video", clip], check=True, stdout=subprocess.DEVNULL)
    info_path = os.path.join(SCRATCH, "clip.json")
    subprocess.run([M3, "preprocess-video", clip, "--json", info_path], check=True, stdout=subprocess.DEVNULL)
    info = json.load(open(info_path))
    per_group = info["tokens"] // info["grid_thw"][0]
    expected = 0
    for ts in info["timestamp_texts"]:
        ids = subprocess.run([M3, "tokenize", "-m", model, "--text", ts], check=True, capture_output=True, text=True).stdout
        expected += len(ids.strip().split(",")) + per_group + 2
    with open(clip, "rb") as f:
        clip_url = "data:video/mp4;base64," + base64.b64encode(f.read()).decode()
    vreq = request(clip_url)
    vreq["messages"][0]["content"][1] = {"type": "video_url", "video_url": {"url": clip_url}}
    st, v1 = server_client.post_chat(warm, vreq)
    check(st == 200 and v1["usage"]["prompt_tokens"] - t["usage"]["prompt_tokens"] == expected,
          f"a video part becomes its {len(info['timestamp_texts'])} groups (timestamp + start + {per_group} + end): "
          f"{v1['usage']['prompt_tokens'] - t['usage']['prompt_tokens'] if st == 200 else v1} tokens, expected {expected}")
    st2, v2 = server_client.post_chat(warm, vreq)
    stc, vc = server_client.post_chat(cold, vreq)
    check(st2 == 200 and stc == 200 and v2["usage"]["prompt_tokens_details"]["cached_tokens"] == v2["usage"]["prompt_tokens"] - 1
          and v2["choices"][0]["logprobs"] == vc["choices"][0]["logprobs"] == v1["choices"][0]["logprobs"],
          "the same video again is reused from the cache, and equals a cold server")
    mixed = request(data_url(a))
    mixed["messages"][0]["content"].append({"type": "video_url", "video_url": {"url": clip_url}})
    st, m = server_client.post_chat(warm, mixed)
    check(st == 200 and m["usage"]["prompt_tokens"] == r1["usage"]["prompt_tokens"] + expected,
          "an image and a video in one message")
    broken = vreq.copy()
    broken["messages"] = [{"role": "user", "content": [{"type": "video_url", "video_url": {
        "url": "data:video/mp4;base64," + base64.b64encode(open(clip, "rb").read()[:600]).decode()}}]}]
    st, r = server_client.post_chat(warm, broken)
    check(st == 400 and r["error"]["param"] == "messages[0].content[0]", f"a truncated clip: 400 ({r.get('error', {}).get('message', '')[:80]})")

    st, r = server_client.post_chat(cold, request(os.path.join(media_dir, "a.png")))
    check(st == 400 and "allowed-local-media-path" in r["error"]["message"], "local paths are refused without the flag")
    st, _ = server_client.post_chat(warm, request(data_url(a)))
    check(st == 200 and warm_proc.poll() is None and cold_proc.poll() is None, "servers keep serving")
finally:
    server_client.stop_servers([warm_proc, cold_proc])

check.finish()
