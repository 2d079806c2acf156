#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/<harness>/.

Seeds are a few valid and near-valid inputs per harness; libFuzzer mutates from them, so each one
should reach a different part of its parser. The outputs are checked in (a few KB each); run this
again after changing it:  /usr/bin/python3 tests/fuzz/make_corpus.py path/to/m3   (m3 writes the videos and small configs).
"""
import io
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parent
REPO = ROOT.parent.parent
NS = "]<]minimax[>["  # prefix of every tool-call tag (src/chat/m3_format.h)


def write(harness, name, data):
    d = ROOT / "corpus" / harness
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


def js(obj):
    return json.dumps(obj, ensure_ascii=False)


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "hours": {"type": "array", "items": {"type": "number"}}}, "required": ["city"]}}}
TINY_PNG_URL = None  # set in images()

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "reasoning_content": "Use the tool.", "content": "",
     "tool_calls": [{"id": "call_0", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": 21}"},
    {"role": "assistant", "content": "21 degrees."},
    {"role": "user", "content": [{"type": "text", "text": "And this? ]~b]user"}]},
]


def requests():
    write("request", "chat_minimal.json", js({"model": "m3", "messages": [{"role": "user", "content": "Hi"}]}))
    write("request", "chat_tools.json", js({
        "model": "m3", "messages": CONVERSATION, "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0.7, "top_p": 0.9, "seed": 3, "max_tokens": 64, "stop": ["\n\n", "END"],
        "stream": True, "stream_options": {"include_usage": True}, "n": 2,
        "logprobs": True, "top_logprobs": 3, "reasoning_effort": "low"}))
    write("request", "chat_image.json", js({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": TINY_PNG_URL, "detail": "low"}},
        {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}]}],
        "chat_template_kwargs": {"thinking_mode": "enabled"}, "response_format": {"type": "json_object"}}))
    write("request", "completion.json", js({
        "model": "m3", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0,
        "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": True, "logit_bias": {"42": -100}}))
    # Near-valid: each is refused for one field.
    write("request", "bad_n.json", js({"messages": [{"role": "user", "content": "x"}], "n": [[[1]]]}))
    write("request", "bad_role.json", js({"messages": [{"role": "robot", "content": "x"}], "tool_choice": "required"}))
    write("request", "bad_json.json", '{"messages": [{"role": "user", "content": "x"}')


def chat_templates():
    # First byte: template options (fuzz_chat_template.cpp); then the JSON.
    write("chat_template", "conversation.json", "0" + js(CONVERSATION))
    write("chat_template", "with_tools.json", "1" + js({"messages": CONVERSATION, "tools": [WEATHER_TOOL]}))
    write("chat_template", "history_no_prompt.json", "<" + js({
        "messages": CONVERSATION[:5], "chat_template_kwargs": {"enable_thinking": False}}))
    write("chat_template", "media.json", "2" + js([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "compare with ]<]image[>["},
        {"type": "video_url", "video_url": {"url": "file:///media/clip.mp4"}},
        {"type": "input_image", "image_url": "https://example.com/x.png"}]}]))
    write("chat_template", "bad_tool_call.json", "0" + js([{"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "", "arguments": "{not json"}}]}]))


def output_parser_seed(text, tools=None, flags=0, chunks=()):
    # Layout of fuzz_output_parser.cpp: flags, n, n chunk sizes (size - 1), tools JSON, NUL, text.
    head = bytes([flags, len(chunks)] + [c - 1 for c in chunks])
    if tools is not None:
        head += js(tools).encode() + b"\0"
    return head + text.encode()


def call(name, params):
    body = "".join(f"{NS}<{k}>{v}{NS}</{k}>\n" for k, v in params)
    return f'{NS}<invoke name="{name}">\n{body}{NS}</invoke>\n'


def output_parser():
    block = f"{NS}<tool_call>\n" + call("get_weather", [("city", "Paris"), ("days", "2"), ("metric", "true"),
                                                        ("hours", "[1, 2.5]")]) + f"{NS}</tool_call>"
    write("output_parser", "tool_call", output_parser_seed("Let me check.\n" + block, [WEATHER_TOOL], 0, (3, 7, 1)))
    write("output_parser", "reasoning_then_call",
          output_parser_seed("I should call it.</mm:think>\n" + block + "\n", [WEATHER_TOOL], 1, (5,)))
    write("output_parser", "two_calls_untyped", output_parser_seed(
        f"{NS}<tool_call>" + call("a", [("x", "<b>bold</b>"), ("x", "dup")]) + call("b", [("q", "é€😀")]) +
        f"{NS}</tool_call>", None, 0, (2, 1, 4)))
    write("output_parser", "truncated_call", output_parser_seed(
        "<mm:think>hm</mm:think>ok " + f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>Par',
        [WEATHER_TOOL], 0, (1,)))
    write("output_parser", "no_parse", output_parser_seed("<mm:think>x</mm:think>" + block, None, 6, ()))


def images():
    global TINY_PNG_URL
    img = Image.new("RGB", (2, 2))
    img.putdata([(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)])
    rgba = Image.new("RGBA", (2, 2), (10, 20, 30, 128))
    for fmt, im, kw in [("PNG", img, {}), ("PNG", rgba, {}), ("BMP", img, {}), ("GIF", img, {}),
                        ("JPEG", img, {"quality": 90}), ("JPEG", img, {"quality": 50, "progressive": True})]:
        buf = io.BytesIO()
        im.save(buf, fmt, **kw)
        suffix = "_rgba" if im.mode == "RGBA" else ("_progressive" if kw.get("progressive") else "")
        write("image", f"2x2{suffix}.{fmt.lower()}", buf.getvalue())
        if fmt == "PNG" and not suffix:
            import base64
            TINY_PNG_URL = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    # JPEG with an EXIF orientation (rotate 90): exercises the APP1 parser.
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    Image.new("RGB", (3, 2), (9, 99, 199)).save(buf, "JPEG", exif=exif.tobytes())
    write("image", "3x2_exif6.jpeg", buf.getvalue())


def safetensors_file(tensors, metadata=None):
    header, blob = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def safetensors():
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    write("safetensors", "tiny.safetensors", safetensors_file([
        ("w", "F32", [2, 2], f32), ("b", "BF16", [3], b"\x80\x3f" * 3), ("s", "I64", [], b"\x07" + b"\0" * 7),
        ("e", "F16", [0, 4], b"")], {"format": "pt"}))
    write("safetensors", "fp8.safetensors", safetensors_file([
        ("q", "F8_E4M3", [4, 2], bytes(range(8))), ("scale", "F32", [1], struct.pack("<f", 0.5))]))
    # Near-valid: offsets past the end, and a header length that lies.
    lying = safetensors_file([("w", "F32", [2, 2], f32)]).replace(b"[0, 16]", b"[0, 64]")
    write("safetensors", "offsets_past_end.safetensors", lying)
    write("safetensors", "short_header.safetensors", struct.pack("<Q", 1 << 40) + b"{}")


def configs():
    real = (REPO / "configs" / "MiniMax-M3" / "config.json").read_text()
    write("config", "MiniMax-M3.json", real)
    # Near-valid: a list that does not match the layer count.
    bad = json.loads(real)
    bt = bad.get("text_config", bad)
    bt["num_hidden_layers"] = int(bt.get("num_hidden_layers", 2)) + 1
    write("config", "layer_mismatch.json", json.dumps(bad))


def m3_configs(m3):
    # Valid small configs (text-only and vision-language) as make-checkpoint writes them: their
    # schemas are small, so mutations of them run fast.
    with tempfile.TemporaryDirectory() as tmp:
        for preset in ["tiny", "tiny-vl"]:
            out = pathlib.Path(tmp) / preset
            subprocess.run([m3, "make-checkpoint", "--preset", preset, "--out", str(out)], check=True,
                           stdout=subprocess.DEVNULL)
            write("config", f"{preset}.json", (out / "config.json").read_bytes())


def videos(m3):
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in [("clip.mp4", ["--encoder", "libx264"]), ("clip.gif", ["--encoder", "gif"]),
                           ("clip.webm", ["--encoder", "libvpx-vp9"])]:
            out = pathlib.Path(tmp) / name
            subprocess.run([m3, "make-video", str(out), "--width", "16", "--height", "16", "--frames", "4",
                            "--fps", "4", *args], check=True, stdout=subprocess.DEVNULL)
            write("video", name, out.read_bytes())


def main():
    m3 = sys.argv[1] if len(sys.argv) > 1 else shutil.which("m3")
    if not m3:
        sys.exit("usage: make_corpus.py PATH_TO_M3 (m3 writes the video and config seeds)")
    images()  # first: the request seeds embed the PNG as a data: URL
    requests()
    chat_templates()
    output_parser()
    safetensors()
    configs()
    m3_configs(m3)
    videos(m3)


if __name__ == "__main__":
    main()
