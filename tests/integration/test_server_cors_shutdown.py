#!/usr/bin/env python3
"""What a browser client and an operator expect of `m3 serve` (docs/SERVER.md): CORS for the origins
given with --cors-origin (preflight without the API key, the allowed origin named on every answer,
other origins refused), the key from --api-key-file or M3_API_KEY, --accept-any-model, 404 for an
unknown model and 405 with Allow for a wrong method; and the graceful shutdown: SIGTERM during
4 streaming requests gives each a final event and [DONE], a short request finishes normally,
no new connection is accepted, and the process exits 0 within the grace period."""
import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-cors-shutdown")
APP = "http://app.example:3000"
KEY = "k-" + "9" * 20


def request(port, method, path, headers=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def chat(prompt="Hello", **extra):
    return dict({"model": "tiny", "temperature": 0, "max_tokens": 8,
                 "messages": [{"role": "user", "content": prompt}]}, **extra)


model = server_client.make_checkpoint(M3, "tiny", 4, os.path.join(SCRATCH, "tiny"))
key_file = os.path.join(SCRATCH, "api-key")
with open(key_file, "w") as f:
    f.write(KEY + "\n")

# --- CORS, the key from a file, 404/405 ---
proc, port = server_client.start_server(
    M3, model, ["-t", "2", "--parallel", "5", "--cors-origin", APP, "--api-key-file", key_file, "--shutdown-grace", "3"],
    os.path.join(SCRATCH, "server.log"))
auth = {"Authorization": "Bearer " + KEY}
try:
    st, h, _ = request(port, "OPTIONS", "/v1/chat/completions",
                       {"Origin": APP, "Access-Control-Request-Method": "POST",
                        "Access-Control-Request-Headers": "authorization, content-type"})
    check(st == 204 and h.get("access-control-allow-origin") == APP and "POST" in h.get("access-control-allow-methods", "")
          and "authorization" in h.get("access-control-allow-headers", "").lower(),
          f"a preflight from an allowed origin needs no key and names the origin, methods and headers ({st} {h})")
    st, h, body = request(port, "POST", "/v1/chat/completions", dict(auth, Origin=APP, **{"Content-Type": "application/json"}), chat())
    check(st == 200 and h.get("access-control-allow-origin") == APP and h.get("vary") == "Origin",
          f"the request itself carries Access-Control-Allow-Origin ({st} {h})")
    st, h, _ = request(port, "GET", "/v1/models", {"Origin": APP})
    check(st == 401 and h.get("access-control-allow-origin") == APP, f"a 401 names the origin too, so the page can read it ({st})")
    st, h, body = request(port, "GET", "/v1/models", dict(auth, Origin="http://evil.example"))
    check(st == 403 and "access-control-allow-origin" not in h and b"--cors-origin" in body,
          f"another origin is refused with 403 ({st} {body[:120]!r})")
    st, h, _ = request(port, "GET", "/v1/models", dict(auth, Origin=f"http://127.0.0.1:{port}"))
    check(st == 200 and "access-control-allow-origin" not in h, f"the server's own origin needs no CORS ({st})")
    st, _, body = request(port, "GET", "/v1/models", {"Authorization": "Bearer wrong"})
    check(st == 401, "the key from --api-key-file is the one required")
    st, _, body = request(port, "GET", "/v1/models/tiny", auth)
    check(st == 200 and json.loads(body)["id"] == "tiny", f"GET /v1/models/tiny ({st})")
    st, _, body = request(port, "GET", "/v1/models/gpt-4o", auth)
    check(st == 404 and json.loads(body)["error"]["code"] == "model_not_found", f"GET /v1/models/gpt-4o is 404 ({st})")
    st, _, body = request(port, "POST", "/v1/chat/completions", dict(auth, **{"Content-Type": "application/json"}),
                          chat(model="gpt-4o"))
    check(st == 404 and json.loads(body)["error"]["param"] == "model", f"a request for another model is 404 ({st} {body[:150]!r})")
    st, h, _ = request(port, "DELETE", "/v1/completions", auth)
    check(st == 405 and h.get("allow") == "POST, OPTIONS", f"405 with Allow for a wrong method ({st} {h.get('allow')})")
    st, h, _ = request(port, "POST", "/health")
    check(st == 405 and h.get("allow") == "GET, OPTIONS", f"405 on /health too ({st})")

    # Logs and metrics: one line per request with its tokens and time to first token; vLLM's histograms.
    log = open(os.path.join(SCRATCH, "server.log")).read()
    check(re.search(r"m3 serve: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z POST /v1/chat/completions 200 [\d.]+ s "
                    r"prompt \d+ \(cached \d+\), generated [1-9]\d*, ttft [\d.]+ s", log) is not None,
          "the access log line has the time, status, duration, tokens and time to first token")
    check(re.search(r"m3 serve: version|m3 serve: m3\.cpp \S+ \(\S+\), CPU path \w+", log) is not None and
          re.search(r"parameters, [\d.]+ \w+ of weights .*loaded in", log) is not None, "the startup summary names the build, CPU path and weights")
    st, _, text = request(port, "GET", "/metrics", auth)
    text = text.decode()
    for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds"):
        m = re.search("^" + re.escape(name) + r"_count (\d+)", text, re.M)
        check(st == 200 and m and int(m.group(1)) >= 1 and re.search("^" + re.escape(name) + r'_bucket\{le="\+Inf"\} ', text, re.M),
              f"/metrics has the histogram {name}")

    # --- graceful shutdown: 4 long streams and a short request in flight, then SIGTERM ---
    results = {}
    started = threading.Barrier(5)

    def long_stream(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v1/chat/completions",
                     json.dumps(chat(f"story {i}", max_tokens=100000, ignore_eos=True, stream=True)),
                     dict(auth, **{"Content-Type": "application/json"}))
        resp = conn.getresponse()
        events, buf, first = [], b"", True
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                events.append(ev.decode())
                if first:
                    first = False
                    started.wait(timeout=60)
        results[i] = (resp.status, events)

    threads = [threading.Thread(target=long_stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait(timeout=60)  # every stream has its first event
    short = {}
    ts = threading.Thread(target=lambda: short.update(r=request(port, "POST", "/v1/chat/completions",
                                                                dict(auth, **{"Content-Type": "application/json"}),
                                                                chat("short", max_tokens=4))))
    ts.start()
    time.sleep(0.2)
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    check(refused, "after SIGTERM no new connection is accepted")
    rc = proc.wait(timeout=60)
    elapsed = time.time() - t0
    for t in threads + [ts]:
        t.join(timeout=30)
    check(rc == 0, f"the server exits 0 (got {rc})")
    check(elapsed < 3 + 10, f"it exits within the 3 s grace period plus the time to end the streams ({elapsed:.1f} s)")
    for i in range(4):
        status, events = results.get(i, (None, []))
        last_json = json.loads(events[-2][6:]) if len(events) >= 2 and events[-2].startswith("data: {") else {}
        check(status == 200 and events and events[-1] == "data: [DONE]" and
              last_json.get("error", {}).get("code") == "server_shutting_down",
              f"stream {i} ends with a server_shutting_down event and [DONE] ({len(events)} events, last {events[-2:]!r})")
    st = short.get("r", (None,))[0]
    check(st == 200 and json.loads(short["r"][2])["choices"][0]["finish_reason"] in ("length", "stop"),
          f"a short request in flight finishes normally within the grace period ({st})")
    log = open(os.path.join(SCRATCH, "server.log")).read()
    check("SIGTERM: no new connections" in log and "m3 serve: stopped" in log, "the log says what the shutdown did")
finally:
    if proc.poll() is None:
        proc.kill()

# --- M3_API_KEY from the environment, --accept-any-model, SIGINT with nothing in flight ---
os.environ["M3_API_KEY"] = KEY
try:
    proc, port = server_client.start_server(M3, model, ["-t", "1", "--accept-any-model"], os.path.join(SCRATCH, "env.log"))
finally:
    del os.environ["M3_API_KEY"]
try:
    st, _, _ = request(port, "GET", "/v1/models")
    check(st == 401, "M3_API_KEY sets the key")
    st, _, body = request(port, "POST", "/v1/chat/completions", dict(auth, **{"Content-Type": "application/json"}),
                          chat(model="any-name"))
    check(st == 200, f"--accept-any-model serves another model name ({st})")
    proc.send_signal(signal.SIGINT)
    check(proc.wait(timeout=30) == 0, "SIGINT with nothing in flight exits 0 at once")
finally:
    if proc.poll() is None:
        proc.kill()
check.finish()
