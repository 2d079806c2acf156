#!/usr/bin/env python3
"""`n` > 1 on /v1/chat/completions and /v1/completions (tiny checkpoint, --parallel 4).

Choice i of a request with n choices and seed s is exactly the answer of the same request with n=1
and seed s+i (each choice is a sequence of its own, batched with its siblings), streaming or not;
usage counts the prompt once and the completion tokens of every choice, and the prompt is prefilled
once (the other choices copy choice 0's cache: m3_prefill_tokens_total); a stream carries each
choice's deltas under its index, one finish_reason per choice, one usage chunk and one [DONE];
n outside 1..16 is a 400 and the server goes on.
"""
import http.client
import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-choices")

model = server_client.make_checkpoint(M3, "tiny", 6, os.path.join(SCRATCH, "tiny"))


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = json.loads(r.read())
    conn.close()
    return r.status, data


# No prefix cache, so every prefilled prompt token shows in m3_prefill_tokens_total.
proc, port = server_client.start_server(M3, model, ["-t", "2", "--parallel", "4", "--cache-mb", "0"],
                                      os.path.join(SCRATCH, "serve.log"))
try:
    base = {"model": "tiny", "temperature": 0.9, "seed": 40, "max_tokens": 20,
            "messages": [{"role": "user", "content": "Name three colours of the sea."}]}
    prefilled_before = server_client.get_metrics("127.0.0.1", port)["m3_prefill_tokens_total"]
    status, many = post(port, "/v1/chat/completions", dict(base, n=3))
    prefilled = server_client.get_metrics("127.0.0.1", port)["m3_prefill_tokens_total"] - prefilled_before
    check(prefilled == many["usage"]["prompt_tokens"], f"the prompt is prefilled once for 3 choices ({prefilled:.0f} tokens "
          f"for a {many['usage']['prompt_tokens']}-token prompt)")
    check(status == 200 and [c["index"] for c in many.get("choices", [])] == [0, 1, 2], f"n=3 gives choices 0, 1, 2 ({status})")
    singles = []
    for i in range(3):
        st, one = post(port, "/v1/chat/completions", dict(base, seed=40 + i))
        singles.append(one)
    same = all(many["choices"][i]["message"] == singles[i]["choices"][0]["message"]
               and many["choices"][i]["finish_reason"] == singles[i]["choices"][0]["finish_reason"] for i in range(3))
    check(same, "choice i equals the n=1 answer with seed + i")
    check(len({json.dumps(c["message"]) for c in many["choices"]}) > 1, "the choices differ (different seeds)")
    u = many["usage"]
    want = sum(s["usage"]["completion_tokens"] for s in singles)
    check(u["prompt_tokens"] == singles[0]["usage"]["prompt_tokens"] and u["completion_tokens"] == want
          and u["total_tokens"] == u["prompt_tokens"] + want, f"usage: prompt once, completions summed {u} vs {want}")

    streamed = server_client.stream_chat("127.0.0.1", port, dict(base, n=3))
    check(sorted(streamed["choices"]) == [0, 1, 2], f"the stream carries choices 0, 1, 2 ({sorted(streamed['choices'])})")
    check(all(streamed["choices"][i]["text"] == (singles[i]["choices"][0]["message"].get("content") or "")
              and streamed["choices"][i]["finish"] == singles[i]["choices"][0]["finish_reason"] for i in range(3)),
          "each streamed choice equals its non-streaming answer")
    check(streamed["usage"]["completion_tokens"] == want, f"one usage chunk with the summed completions {streamed['usage']}")

    cbody = {"model": "tiny", "prompt": "The sea is", "temperature": 0.9, "seed": 5, "max_tokens": 12}
    st, comp = post(port, "/v1/completions", dict(cbody, n=2))
    st1, comp1 = post(port, "/v1/completions", dict(cbody, seed=6))
    check(st == 200 and len(comp["choices"]) == 2 and comp["choices"][1]["text"] == comp1["choices"][0]["text"],
          "/v1/completions: choice 1 equals the n=1 answer with seed + 1")

    for bad in (0, 17, "2"):
        st, err = post(port, "/v1/chat/completions", dict(base, n=bad))
        check(st == 400 and "n" in err.get("error", {}).get("message", ""), f"n={bad!r} is a 400 naming n ({st}, {err})")
    st, again = post(port, "/v1/chat/completions", dict(base, seed=40))
    check(st == 200 and again["choices"][0]["message"] == singles[0]["choices"][0]["message"], "the server still answers")
finally:
    server_client.stop_servers([proc])

check.finish()
