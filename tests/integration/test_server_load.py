#!/usr/bin/env python3
"""Bounded loopback load test of `m3 serve` with continuous batching.

Eight streaming clients send three chat requests each to a server with --parallel 4 (so requests
queue, and up to four sequences share every forward pass). Checks: zero errors; every stream is
well-formed (deltas, finish_reason, usage, [DONE]); each greedy answer is exactly the answer a
--parallel 1 server gives to the same request alone (batching is exact); /metrics shows that
forward passes really carried several sequences; a client that stalls mid-request is dropped after
--timeout while the others are served; a non-streaming client that disconnects cancels its
generation; the server is alive at the end.
"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-load")


model = os.path.join(SCRATCH, "tiny")
server_client.make_checkpoint(M3, "tiny", 5, model)

CLIENTS, PER_CLIENT = 8, 3
topics = ["rivers", "stars", "bread", "clocks", "maps", "bees", "salt", "glass", "kites", "ink", "moss", "tides"]


def body(i, j):
    # Different prompts (different lengths, so prefills and decodes interleave) and lengths.
    words = " ".join(topics[(i + j + k) % len(topics)] for k in range(1 + (i * 3 + j) % 7))
    return {"model": "tiny", "temperature": 0, "max_tokens": 12 + 5 * ((i + 2 * j) % 4),
            "messages": [{"role": "user", "content": f"Tell me about {words}."}]}


bodies = [[body(i, j) for j in range(PER_CLIENT)] for i in range(CLIENTS)]
serial_proc, serial_port = server_client.start_server(M3, model, ["-t", "2", "--parallel", "1", "--cache-mb", "0"],
                                                    os.path.join(SCRATCH, "serial.log"))
proc, port = server_client.start_server(M3, model, ["-t", "2", "--parallel", "4", "--timeout", "2"],
                                      os.path.join(SCRATCH, "batched.log"))
try:
    # The reference answers, one request at a time.
    expected = [[server_client.stream_chat("127.0.0.1", serial_port, b) for b in row] for row in bodies]

    # A client that sends half a request and stalls.
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"mod")
    stalled_at = time.time()

    results, errors, wall = server_client.run_clients("127.0.0.1", port, bodies)
    check(not errors, f"{CLIENTS} clients x {PER_CLIENT} streaming requests: zero errors {errors[:3]}")
    same = all(results[i][j] is not None and results[i][j]["text"] == expected[i][j]["text"]
               and results[i][j]["reasoning"] == expected[i][j]["reasoning"]
               and results[i][j]["finish"] == expected[i][j]["finish"]
               and results[i][j]["usage"]["completion_tokens"] == expected[i][j]["usage"]["completion_tokens"]
               for i in range(CLIENTS) for j in range(PER_CLIENT))
    check(same, "every batched answer equals the --parallel 1 answer (greedy)")
    lengths_ok = all(r["usage"]["completion_tokens"] <= bodies[i][j]["max_tokens"]
                     for i, row in enumerate(results) for j, r in enumerate(row) if r)
    check(lengths_ok, "completion_tokens within max_tokens")

    m = server_client.get_metrics("127.0.0.1", port)
    steps = m.get("m3_engine_steps_total", 0)
    mean_batch = m.get("m3_engine_step_sequences_total", 0) / steps if steps else 0
    check(mean_batch > 1.0, f"forward passes carried several sequences (mean {mean_batch:.2f} per pass)")
    check(m.get("m3_requests_running", -1) == 0 and m.get("m3_queue_length", -1) == 0, "no request left running or queued")
    print(f"# {CLIENTS * PER_CLIENT} requests in {wall:.2f} s, {steps:.0f} engine steps, mean batch {mean_batch:.2f}")

    # The stalled client is dropped once --timeout (2 s) has passed, without harming the server.
    stalled.settimeout(10)
    try:
        data = stalled.recv(4096)
        dropped = True
    except socket.timeout:
        data, dropped = b"", False
    check(dropped, f"a client stalling mid-request is dropped after --timeout ({time.time() - stalled_at:.1f} s; answer {data[:40]!r})")
    stalled.close()

    # A client that leaves while its non-streaming answer is being generated cancels it: the
    # sequence ends (m3_cancelled_total) instead of decoding 30,000 tokens for nobody.
    cancelled_before = server_client.get_metrics("127.0.0.1", port).get("m3_cancelled_total", 0)
    long_body = json.dumps({"model": "tiny", "temperature": 0, "ignore_eos": True, "max_tokens": 30000,
                            "messages": [{"role": "user", "content": "Talk for a long time."}]}).encode()
    leaver = socket.create_connection(("127.0.0.1", port))
    leaver.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(len(long_body)).encode() + b"\r\n\r\n" + long_body)
    time.sleep(0.5)
    leaver.close()
    m = {}
    for _ in range(200):  # bounded wait for the engine to notice (it polls every 100 ms)
        m = server_client.get_metrics("127.0.0.1", port)
        if m.get("m3_cancelled_total", 0) > cancelled_before and m.get("m3_requests_running", -1) == 0:
            break
        time.sleep(0.1)
    check(m.get("m3_cancelled_total", 0) == cancelled_before + 1 and m.get("m3_requests_running", -1) == 0,
          f"a non-streaming client that disconnects cancels its generation (cancelled {m.get('m3_cancelled_total')}, "
          f"running {m.get('m3_requests_running')}, completion tokens so far {m.get('m3_completion_tokens_total')})")

    again = server_client.stream_chat("127.0.0.1", port, bodies[0][0])
    check(again["text"] == expected[0][0]["text"], "the server still answers after the load and the stalled client")
    check(proc.poll() is None, "server alive at the end")
finally:
    server_client.stop_servers([proc, serial_proc])

check.finish()
