#!/usr/bin/env python3
"""Hostile request bodies and media against a real `m3 serve` (tiny-vl checkpoint, --parallel 2),
the regression tests of issue 14's findings in the request parser, media and sampler:

- JSON nested 100,000 / 1,000,000 levels deep (as `n`, `messages[0].content`, an unknown field
  placed first, `prompt`, `tools[0].function.parameters`, a past tool call's `arguments`) crashed
  the server; now a 400 naming the depth limit (and --max-json-depth moves the limit).
- `data:,AAAA` and `data:x,AAAA` gave HTTP 500; now 400.
- Images whose header claims 9000 x 9000 around a few bytes (BMP, JPEG, PNG, GIF), a PNG claiming
  4294967295 x 4294967295, a PNG with a wrong IHDR CRC: now 400 naming the part.
- A FIFO inside the allowed media folder blocked the request thread; now 400 (regular files only).
- `logit_bias` was accepted and ignored; now it moves greedy decoding on chat and completions,
  and malformed maps are 400s; unknown fields are 400s instead of being ignored.
After each hostile request the server must still answer /health. Client timeouts only detect hangs.
"""
import base64
import http.client
import io
import json
import os
import struct
import subprocess
import sys
import zlib

from PIL import Image

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-hostile")
HANG_SECONDS = 120


def post(port, path, body_bytes):
    """(status, parsed JSON or None) for a raw body; raises on a dropped connection or a hang."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_SECONDS)
    conn.request("POST", path, body_bytes, {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, None


def healthy(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


class Server:
    """One `m3 serve`; restarted (and the crash counted as a failure) if a request kills it, so
    that every later check still tests what it names."""

    def __init__(self, args, log):
        self.args, self.log, self.starts = args, log, 0
        self.start()

    def start(self):
        self.starts += 1
        self.proc, self.port = server_client.start_server(M3, model, self.args, f"{self.log}.{self.starts}")

    def alive_after(self, what):
        ok = healthy(self.port)
        check(ok and self.proc.poll() is None, f"{what}: /health still answers")
        if not ok:
            server_client.stop_servers([self.proc])
            self.start()

    def logs(self):
        return [f"{self.log}.{i}" for i in range(1, self.starts + 1)]


def expect_400(server, path, body_bytes, what, needle=None, param=None):
    try:
        st, r = post(server.port, path, body_bytes)
    except (OSError, http.client.HTTPException) as e:
        check(False, f"{what}: connection failed ({e!r})")
        server.alive_after(what)
        return
    msg = (r or {}).get("error", {}).get("message", "") if isinstance(r, dict) else ""
    ok = st == 400 and (needle is None or needle in msg) and (param is None or r["error"]["param"] == param)
    check(ok, f"{what}: 400 ({st}: {msg[:120]})")
    server.alive_after(what)


def chat_body(**fields):
    body = {"model": "tiny-vl", "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": "Hello there."}]}
    body.update(fields)
    return body


def image_part_body(url):
    return json.dumps(chat_body(messages=[{"role": "user", "content": [
        {"type": "text", "text": "Look."}, {"type": "image_url", "image_url": {"url": url}}]}])).encode()


def data_url(b, mime):
    return f"data:{mime};base64," + base64.b64encode(b).decode()


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_claiming(w, h):
    """A PNG whose (correctly checksummed) IHDR claims w x h around one row of real data."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\x00" * 49))
            + png_chunk(b"IEND", b""))


def small_image(fmt):
    img = Image.new("RGB", (16, 16), (90, 120, 150))
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def jpeg_claiming(w, h):
    b = bytearray(small_image("JPEG"))
    p = 2
    while not (b[p] == 0xFF and b[p + 1] in (0xC0, 0xC1, 0xC2)):
        p += 2 + (b[p + 2] << 8 | b[p + 3])
    b[p + 5:p + 9] = struct.pack(">HH", h, w)
    return bytes(b)


def bmp_claiming(w, h):
    """342 bytes: the headers of a 24-bit w x h BMP and 288 bytes of pixels."""
    header = b"BM" + struct.pack("<IHHI", 342, 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return header + info + b"\x7f" * 288


def gif_claiming(w, h):
    return (b"GIF89a" + struct.pack("<HH", w, h) + b"\x80\x00\x00" + b"\x00\x00\x00\xff\xff\xff"
            + b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\x00\x02\x02\x44\x01\x00\x3b")


def deep(levels):
    return "[" * levels + "]" * levels


model = os.path.join(SCRATCH, "tiny-vl")
server_client.make_checkpoint(M3, "tiny-vl", 4, model)
media_dir = os.path.join(SCRATCH, "media")
os.makedirs(media_dir, exist_ok=True)
fifo = os.path.join(media_dir, "pipe.png")
if not os.path.exists(fifo):
    os.mkfifo(fifo)
with open(os.path.join(media_dir, "ok.png"), "wb") as f:
    f.write(small_image("PNG"))

main = Server(["-t", "2", "--parallel", "2", "--allowed-local-media-path", media_dir], os.path.join(SCRATCH, "serve.log"))
shallow = Server(["-t", "2", "--max-json-depth", "6"], os.path.join(SCRATCH, "serve-shallow.log"))
try:
    st, r = server_client.post_chat(main.port, chat_body())
    check(st == 200, f"a plain chat request is answered ({st})")

    # --- 1. nesting depth ---
    chat = "/v1/chat/completions"
    d100k, d1m = deep(100_000), deep(1_000_000)
    expect_400(main, chat, ('{"messages":[{"role":"user","content":"x"}],"n":' + d100k + "}").encode(),
               "100,000 levels as n", "limit of 128")
    expect_400(main, chat, ('{"messages":[{"role":"user","content":' + d1m + "}]}").encode(),
               "1,000,000 levels as messages[0].content (2 MB)", "limit of 128")
    expect_400(main, chat, ('{"zzz":' + d1m + ',"messages":[{"role":"user","content":"x"}]}').encode(),
               "1,000,000 levels in an unknown field placed first", "limit of 128")
    expect_400(main, "/v1/completions", ('{"prompt":' + d100k + "}").encode(), "100,000 levels as prompt", "limit of 128")
    tools = '[{"type":"function","function":{"name":"f","parameters":' + deep(10_000) + "}}]"
    expect_400(main, chat, ('{"messages":[{"role":"user","content":"x"}],"tools":' + tools + "}").encode(),
               "10,000 levels in tools[0].function.parameters", "limit of 128")
    args = json.dumps('{"a":' + deep(100_000) + "}")
    history = ('{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c",'
               '"type":"function","function":{"name":"f","arguments":' + args + '}}]},'
               '{"role":"tool","tool_call_id":"c","content":"done"}]}')
    expect_400(main, chat, history.encode(), "100,000 levels inside a past tool call's arguments string",
               param="messages[1].tool_calls[0].function.arguments")
    st, _ = post(main.port, chat, json.dumps(chat_body(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object"}}}}}}])).encode())
    check(st == 200, f"a normal nested tool schema is still accepted ({st})")
    st, _ = post(shallow.port, chat, json.dumps(chat_body()).encode())
    check(st == 200, f"--max-json-depth 6: a 3-deep body is accepted ({st})")
    expect_400(shallow, chat, json.dumps(chat_body(stop=[[[[[["x"]]]]]])).encode(),
               "--max-json-depth 6: a 7-deep body is refused", "limit of 6")

    # --- 2. media ---
    for url in ["data:,AAAA", "data:x,AAAA", "data:", "data:;base64", "data:,"]:
        expect_400(main, chat, image_part_body(url), f"image URL {url!r}", param="messages[0].content[1]")
    bombs = [("BMP", bmp_claiming(9000, 9000), "image/bmp"), ("JPEG", jpeg_claiming(9000, 9000), "image/jpeg"),
             ("PNG", png_claiming(9000, 9000), "image/png"), ("GIF", gif_claiming(9000, 9000), "image/gif")]
    for name, b, mime in bombs:
        expect_400(main, chat, image_part_body(data_url(b, mime)),
                   f"a {len(b)}-byte {name} claiming 9000 x 9000", "can hold at most", "messages[0].content[1]")
    expect_400(main, chat, image_part_body(data_url(png_claiming(0xFFFFFFFF, 0xFFFFFFFF), "image/png")),
               "a PNG claiming 4294967295 x 4294967295", "limit", "messages[0].content[1]")
    bad_crc = bytearray(small_image("PNG"))
    bad_crc[29] ^= 1
    expect_400(main, chat, image_part_body(data_url(bytes(bad_crc), "image/png")),
               "a PNG with a wrong IHDR CRC", "wrong CRC", "messages[0].content[1]")
    expect_400(main, chat, image_part_body(fifo), "a FIFO in the allowed media folder", "not a regular file",
               "messages[0].content[1]")
    st, _ = post(main.port, chat, image_part_body(os.path.join(media_dir, "ok.png")))
    check(st == 200, f"a regular file in the allowed media folder is still read ({st})")

    # --- 3. logit_bias, greedy ---
    def tokenize(text):
        out = subprocess.run([M3, "tokenize", "-m", model, "--special", "--text", text], check=True, capture_output=True,
                             text=True)
        return [int(x) for x in out.stdout.strip().split(",") if x]

    def detokenize(ids):
        return subprocess.run([M3, "tokenize", "-m", model, "--decode", "--text", ",".join(map(str, ids))],
                              check=True, capture_output=True, text=True).stdout

    forced = tokenize("hello")[0]
    comp = {"model": "tiny-vl", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}
    st0, plain = post(main.port, "/v1/completions", json.dumps(comp).encode())
    st1, biased = post(main.port, "/v1/completions", json.dumps(dict(comp, logit_bias={str(forced): 100})).encode())
    want = detokenize([forced] * 4)
    check(st0 == 200 and st1 == 200 and biased["choices"][0]["text"] == want != plain["choices"][0]["text"],
          f"completions, greedy: +100 on token {forced} makes every token {forced} "
          f"({biased['choices'][0]['text'] if st1 == 200 else biased!r} vs {want!r}; "
          f"unbiased {plain['choices'][0]['text'] if st0 == 200 else plain!r})")

    # Chat: the greedy first token is the top raw candidate; -100 on it must make the runner-up win.
    req = chat_body(max_tokens=1, logprobs=True, top_logprobs=2, chat_template_kwargs={"thinking_mode": "disabled"})
    st0, r0 = post(main.port, chat, json.dumps(req).encode())
    content = r0["choices"][0]["logprobs"]["content"] if st0 == 200 else []
    top = content[0]["top_logprobs"] if content else []
    ids = tokenize(top[0]["token"]) if len(top) == 2 else []
    check(len(ids) == 1 and top[0]["logprob"] > top[1]["logprob"],
          f"chat, greedy: the first token has a unique id and a clear runner-up ({top}, ids {ids})")
    if len(ids) == 1:
        st1, r1 = post(main.port, chat, json.dumps(dict(req, logit_bias={str(ids[0]): -100})).encode())
        got = r1["choices"][0]["logprobs"]["content"][0]["token"] if st1 == 200 else r1
        check(st1 == 200 and got == top[1]["token"],
              f"chat, greedy: -100 on the greedy token {ids[0]} ({top[0]['token']!r}) picks the runner-up "
              f"{top[1]['token']!r} (got {got!r})")
    for bad in [[1], "x", {"a": 1}, {"1.5": 1}, {"-3": 1}, {"1": "x"}, {"1": 101}, {"1": -100.5}, {"1000000": 1}]:
        expect_400(main, chat, json.dumps(chat_body(logit_bias=bad)).encode(), f"logit_bias {json.dumps(bad)}")
    expect_400(main, "/v1/completions", json.dumps(dict(comp, logit_bias={"99999999": 5})).encode(),
               "completions: logit_bias id outside the vocabulary", "outside the vocabulary", "logit_bias")

    # --- 4. fields that would be ignored are refused ---
    for extra in [{"functions": []}, {"parallel_tool_calls": False}, {"audio": {}}, {"frobnicate": 1}]:
        expect_400(main, chat, json.dumps(chat_body(**extra)).encode(), f"chat field {json.dumps(extra)}")
    st, _ = post(main.port, chat, json.dumps(chat_body(user="someone")).encode())
    check(st == 200, f"`user` (an end-user id with no effect on the output) is accepted ({st})")

    check(main.starts == 1 and shallow.starts == 1 and healthy(main.port) and healthy(shallow.port),
          f"both servers still serve, never restarted ({main.starts - 1} and {shallow.starts - 1} restarts)")
finally:
    server_client.stop_servers([main.proc, shallow.proc])

for path in main.logs() + shallow.logs():
    text = open(path).read()
    check("runtime error:" not in text and "Sanitizer" not in text, f"no sanitizer report in {os.path.basename(path)}")
check.finish()
