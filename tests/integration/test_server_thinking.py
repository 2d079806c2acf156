#!/usr/bin/env python3
"""reasoning_effort caps thinking in `m3 serve`: at the cap the engine closes the thought itself
and the model goes on with the answer.

On a tiny random checkpoint (greedy, thinking enabled, so the random model never closes a thought on
its own within the limits used here): a budget of N reasoning tokens gives exactly N
(usage.completion_tokens_details.reasoning_tokens), the reasoning is the first N tokens' worth of the
uncapped reasoning (same greedy path up to the cap), content follows it, and streaming agrees with
non-streaming; budget 0 skips thinking; named efforts map as docs/CHAT_FORMAT.md says; bad values are
400s naming reasoning_effort.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-thinking")



def body(effort, max_tokens=24, **extra):
    b = {"model": "tiny", "temperature": 0, "max_tokens": max_tokens,
         "chat_template_kwargs": {"thinking_mode": "enabled"},
         "messages": [{"role": "user", "content": "Think, then answer: what is 6 x 7?"}]}
    if effort is not None:
        b["reasoning_effort"] = effort
    b.update(extra)
    return b


model = os.path.join(SCRATCH, "tiny")
server_client.make_checkpoint(M3, "tiny", 1, model)
proc, port = server_client.start_server(M3, model, ["-t", "2", "--parallel", "2"], os.path.join(SCRATCH, "server.log"))
try:
    st, free = server_client.post_chat(port, body(None))
    free_reasoning = free["choices"][0]["message"].get("reasoning_content") or ""
    check(st == 200 and free["usage"]["completion_tokens_details"]["reasoning_tokens"] == 24,
          f"uncapped: the random model thinks through all 24 tokens ({free['usage'] if st == 200 else free})")
    for n in (3, 7):
        st, r = server_client.post_chat(port, body(n))
        m = r["choices"][0]["message"] if st == 200 else {}
        rt = r["usage"].get("completion_tokens_details", {}).get("reasoning_tokens") if st == 200 else None
        check(rt == n, f"reasoning_effort {n}: exactly {n} reasoning tokens (got {rt})")
        check(free_reasoning.startswith(m.get("reasoning_content") or "\0") and m.get("reasoning_content"),
              f"reasoning_effort {n}: the reasoning is the uncapped reasoning cut at the cap")
        check(bool(m.get("content")), f"reasoning_effort {n}: the answer follows the closed thought ({m.get('content')!r:.40})")
        # The closer is generated (forced), so it counts as a completion token.
        check(r["usage"]["completion_tokens"] == 24, "completion_tokens counts the forced closer")
        s = server_client.stream_chat("127.0.0.1", port, body(n))
        check(s["reasoning"] == m.get("reasoning_content") and s["text"] == m.get("content"),
              f"reasoning_effort {n}: streaming equals non-streaming")
    st, r = server_client.post_chat(port, body("7"))
    check(st == 200 and r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 7, "a budget as a string of digits")
    st, r = server_client.post_chat(port, body(0))
    check(st == 200 and not r["choices"][0]["message"].get("reasoning_content")
          and r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0, "budget 0: no thinking")
    st, r = server_client.post_chat(port, {**body("none"), "chat_template_kwargs": {}})
    check(st == 200 and not r["choices"][0]["message"].get("reasoning_content"), "reasoning_effort none: thinking disabled")
    st, r = server_client.post_chat(port, body("low", max_tokens=8))
    check(st == 200 and r["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8,
          "reasoning_effort low: the 1024-token cap is not reached in 8 tokens")
    for bad in ("extreme", -1, 1.5, "12x"):
        st, r = server_client.post_chat(port, body(bad))
        check(st == 400 and r["error"]["param"] == "reasoning_effort", f"reasoning_effort {bad!r}: 400 naming the field")
    check(proc.poll() is None, "server alive at the end")
finally:
    server_client.stop_servers([proc])

check.finish()
