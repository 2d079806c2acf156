"""Clients and helpers for tests and benchmarks of `m3 serve` (Python standard library only).

Used by tests/integration/test_server_*.py and
scripts/bench_serve.py (requests/s, time to first token, tokens/s).
"""
import http.client
import json
import threading
import time


def stream_chat(host, port, body, timeout=120):
    """POSTs a streaming chat completion; returns a dict with the text, the finish reason, usage,
    the time to the first content/reasoning token and the total time, and per choice index (n > 1)
    its own text, reasoning and finish reason under "choices". Raises on any protocol error."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    payload = dict(body, stream=True, stream_options={"include_usage": True})
    conn.request("POST", "/v1/chat/completions", json.dumps(payload), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    text, reasoning, finish, usage, ttft, done = "", "", None, None, None, False
    choices = {}
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            line = event.decode()
            if not line.startswith("data: "):
                raise RuntimeError(f"not an SSE data line: {line[:100]!r}")
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            obj = json.loads(data)
            if "error" in obj:
                raise RuntimeError(f"error event: {obj['error']}")
            if obj.get("usage"):
                usage = obj["usage"]
            for ch in obj.get("choices", []):
                delta = ch.get("delta", {})
                piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                if piece and ttft is None:
                    ttft = time.perf_counter() - t0
                text += delta.get("content") or ""
                reasoning += delta.get("reasoning_content") or ""
                mine = choices.setdefault(ch.get("index"), {"text": "", "reasoning": "", "finish": None})
                mine["text"] += delta.get("content") or ""
                mine["reasoning"] += delta.get("reasoning_content") or ""
                if ch.get("finish_reason"):
                    if mine["finish"] is not None:
                        raise RuntimeError(f"choice {ch.get('index')} finished twice")
                    finish = mine["finish"] = ch["finish_reason"]
    conn.close()
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    if usage is None or finish is None:
        raise RuntimeError("stream without usage or finish_reason")
    total = time.perf_counter() - t0
    return {"text": text, "reasoning": reasoning, "finish": finish, "usage": usage,
            "ttft": ttft if ttft is not None else total, "seconds": total, "choices": choices}


def run_clients(host, port, bodies_per_client):
    """Runs one thread per client; client i sends bodies_per_client[i] one after another.
    Returns (results[i][j], errors, wall seconds)."""
    results = [[None] * len(b) for b in bodies_per_client]
    errors = []
    lock = threading.Lock()

    def client(i):
        for j, body in enumerate(bodies_per_client[i]):
            try:
                results[i][j] = stream_chat(host, port, body)
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with lock:
                    errors.append(f"client {i} request {j}: {e}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(bodies_per_client))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors, time.perf_counter() - t0


def get_metrics(host, port):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, v = line.split()
            values[name] = float(v)
    return values


def start_server(m3_bin, model_dir, args, log_path):
    """Starts `m3 serve` on a free loopback port; returns (process, port) once /health answers."""
    import re
    import subprocess
    log = open(log_path, "w")
    proc = subprocess.Popen([m3_bin, "serve", "-m", model_dir, "--host", "127.0.0.1", "--port", "0", *args],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    port = None
    while time.time() < deadline and proc.poll() is None:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
        if m:
            port = int(m.group(1))
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return proc, port
            except OSError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"m3 serve did not come up: {open(log_path).read()[-2000:]}")


def post_chat(port, body, timeout=120):
    """A non-streaming chat completion: (HTTP status, parsed JSON body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = json.loads(r.read())
    conn.close()
    return r.status, data


def make_checkpoint(m3_bin, preset, seed, out_dir):
    import subprocess
    subprocess.run([m3_bin, "make-checkpoint", "--preset", preset, "--seed", str(seed), "--out", out_dir], check=True,
                   stdout=subprocess.DEVNULL)
    return out_dir


def stop_servers(procs):
    import subprocess
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


class Checks:
    """TAP-like "ok - ..." lines; finish() prints the summary and exits non-zero on any failure."""

    def __init__(self, name):
        self.name, self.failures = name, []

    def __call__(self, cond, what):
        print(("ok - " if cond else "not ok - ") + what, flush=True)
        if not cond:
            self.failures.append(what)

    def finish(self):
        import sys
        print(f"{self.name}: {'FAILED ' + str(len(self.failures)) if self.failures else 'all passed'}")
        sys.exit(1 if self.failures else 0)
