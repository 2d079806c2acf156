#!/usr/bin/env python3
"""response_format {"type": "json_object"} on a tiny random checkpoint: whatever the random model
prefers, the answer is always JSON — a complete object when it ends with "stop", a prefix of one when
max_tokens cut it — with thinking off and with the adaptive template (the thought itself is free);
streaming equals non-streaming; json_schema and unknown types are 400s. The JSON check here is this
file's own recursive-descent parser, independent of the engine's recognizer."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-json")


class NeedMore(Exception):
    pass


def json_object_prefix(text):
    """'complete' if text is one JSON object (with whitespace around), 'prefix' if some text
    continues it into one, 'invalid' otherwise."""
    s, i = text, [0]

    def peek():
        if i[0] >= len(s):
            raise NeedMore()
        return s[i[0]]

    def ws():
        while i[0] < len(s) and s[i[0]] in " \t\n\r":
            i[0] += 1

    def lit(word):
        for ch in word:
            if peek() != ch:
                raise ValueError
            i[0] += 1

    def string():
        lit('"')
        while True:
            c = peek()
            i[0] += 1
            if c == '"':
                return
            if c == "\\":
                e = peek()
                i[0] += 1
                if e == "u":
                    for _ in range(4):
                        if peek() not in "0123456789abcdefABCDEF":
                            raise ValueError
                        i[0] += 1
                elif e not in '"\\/bfnrt':
                    raise ValueError
            elif ord(c) < 0x20:
                raise ValueError

    def digits(required):
        n = 0
        while i[0] < len(s) and s[i[0]].isdigit():
            i[0] += 1
            n += 1
        if required and n == 0:
            peek()  # at the end: more may come
            raise ValueError

    def number():
        if peek() == "-":
            i[0] += 1
        if peek() == "0":
            i[0] += 1
        else:
            digits(True)
        if i[0] < len(s) and s[i[0]] == ".":
            i[0] += 1
            digits(True)
        if i[0] < len(s) and s[i[0]] in "eE":
            i[0] += 1
            if peek() in "+-":
                i[0] += 1
            digits(True)
        if i[0] == len(s):
            raise NeedMore()  # a number at the end may go on

    def value():
        ws()
        c = peek()
        if c == "{":
            obj()
        elif c == "[":
            i[0] += 1
            ws()
            if peek() == "]":
                i[0] += 1
                return
            while True:
                value()
                ws()
                c = peek()
                i[0] += 1
                if c == "]":
                    return
                if c != ",":
                    raise ValueError
        elif c == '"':
            string()
        elif c == "t":
            lit("true")
        elif c == "f":
            lit("false")
        elif c == "n":
            lit("null")
        elif c == "-" or c.isdigit():
            number()
        else:
            raise ValueError

    def obj():
        lit("{")
        ws()
        if peek() == "}":
            i[0] += 1
            return
        while True:
            ws()
            string()
            ws()
            lit(":")
            value()
            ws()
            c = peek()
            i[0] += 1
            if c == "}":
                return
            if c != ",":
                raise ValueError

    try:
        ws()
        obj()
        ws()
        return "complete" if i[0] == len(s) else "invalid"
    except NeedMore:
        return "prefix"
    except ValueError:
        return "invalid"


# The checker itself.
assert json_object_prefix('{"a": [1, 2.5e3, "x\\n", {}]} ') == "complete"
assert json_object_prefix('{"a": [1, 2.') == "prefix"
assert json_object_prefix('{"a": 01}') == "invalid"
assert json_object_prefix('[1]') == "invalid"
assert json_object_prefix('{"a": tr') == "prefix"

model = server_client.make_checkpoint(M3, "tiny", 8, os.path.join(SCRATCH, "tiny"))
proc, port = server_client.start_server(M3, model, ["-t", "2", "--parallel", "2"], os.path.join(SCRATCH, "serve.log"))
try:
    outcomes = []
    for seed in range(8):
        for thinking in (False, True):
            body = {"model": "tiny", "temperature": 1.0, "seed": seed, "max_tokens": 60 + 20 * seed,
                    "response_format": {"type": "json_object"},
                    "messages": [{"role": "user", "content": "Give me a JSON object about the sea."}]}
            if not thinking:
                body["chat_template_kwargs"] = {"enable_thinking": False}
            st, r = server_client.post_chat(port, body)
            if st != 200:
                check(False, f"seed {seed}: HTTP {st} {r}")
                continue
            ch = r["choices"][0]
            content = ch["message"].get("content") or ""
            kind = json_object_prefix(content)
            outcomes.append((kind, ch["finish_reason"]))
            ok = (kind == "complete" and ch["finish_reason"] == "stop") or (kind == "prefix" and ch["finish_reason"] == "length")
            check(ok, f"seed {seed}, thinking {thinking}: {kind} JSON, finish {ch['finish_reason']}: {content[:80]!r}")
            if kind == "complete":
                check(isinstance(json.loads(content), dict), f"seed {seed}: json.loads gives an object")
            if seed == 3:
                streamed = server_client.stream_chat("127.0.0.1", port, body)
                check(streamed["text"] == content and streamed["finish"] == ch["finish_reason"],
                      f"seed {seed}, thinking {thinking}: streaming equals non-streaming")
    print(f"# outcomes: {outcomes}")
    check(any(k == "complete" for k, _ in outcomes), "some answers close their object and stop")

    plain = {"model": "tiny", "temperature": 1.0, "seed": 1, "max_tokens": 40,
             "messages": [{"role": "user", "content": "Give me a JSON object about the sea."}],
             "chat_template_kwargs": {"enable_thinking": False}}
    st, r = server_client.post_chat(port, plain)
    check(json_object_prefix(r["choices"][0]["message"].get("content") or "") == "invalid",
          "without response_format the random model does not write JSON (the constraint is what does)")
    for rf, word in (({"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}, "json_schema"),
                     ({"type": "yaml"}, "yaml"), ("json", "response_format")):
        st, r = server_client.post_chat(port, dict(plain, response_format=rf))
        check(st == 400 and word in r.get("error", {}).get("message", ""), f"response_format {rf!r} is a 400 ({st}, {r})")
    check(proc.poll() is None, "server alive at the end")
finally:
    server_client.stop_servers([proc])

check.finish()
