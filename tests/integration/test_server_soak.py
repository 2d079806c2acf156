#!/usr/bin/env python3
"""Bounded loopback soak test of `m3 serve` (issue 14, items 6 and 7).

N clients (default 8) send requests back to back for --seconds against a tiny checkpoint served with
--parallel 4 (so requests queue) and a small --cache-mb (so the prefix cache fills and evicts):
streaming and non-streaming chat completions (some continuing their previous conversation, some
with n = 2) and /v1/completions, mixed with clients that hang up at random points: in the middle of
the request head, in the middle of the body, right after sending the request, while a non-streaming
answer is pending, and after reading part of a stream (half of those with a reset instead of a FIN).

At the end it checks:
- zero unexpected errors: every request that was read to its end is a 200 with a well-formed body
  (streams: SSE events, one role delta, one finish_reason per choice, usage, [DONE] last), and every
  hang-up saw a 200 and well-formed events before it hung up; hang-ups themselves are not errors;
- the server counted no 5xx, still answers /health, and /metrics shows nothing running or queued
  (polled for a while: the engine retires cancelled sequences after its current step), and some
  generations were cancelled by the hang-ups;
- the prefix cache stayed within --cache-mb in every /metrics sample;
- the server's RSS (VmRSS from /proc/PID/status, sampled every second) is flat after warm-up: the
  mean of the last window is within 10% of the mean of the first window after warm-up;
- after the load, rounds of 16 concurrent bodies of 3-7 MiB (refused with 400: an unknown field)
  leave RSS within 10% of what it was before them: per-request buffers are returned, not kept by
  the allocator (glibc's growing mmap threshold kept them: 35 -> 190 MiB before `m3 serve` fixed it).
No check on speed: the request counts are printed, not asserted beyond "some of each kind".

  python3 tests/integration/test_server_soak.py --seconds 600 --clients 8 --report soak.json
ctest runs it with the defaults (90 s, 8 clients; warm-up 30 s, 10 s windows). Outside ctest M3_BIN defaults to
build/release/m3 and M3_SCRATCH to a fresh temporary folder.
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import struct
import sys
import tempfile
import threading
import time

SOURCE = os.environ.get("M3_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ.get("M3_BIN") or os.path.join(SOURCE, "build", "release", "m3")
HOST = "127.0.0.1"
REQUEST_TIMEOUT = 120  # client-side; only turns a hang into an error instead of a stuck test

WORDS = ("river star bread clock map bee salt glass kite ink moss tide stone cloud lamp rope seed "
         "wheel honey paper frost ember reed anchor lantern meadow copper thunder willow").split()
SYSTEM_PROMPTS = [
    "You are a careful assistant. Answer briefly and plainly. " + " ".join(WORDS[:20]) * 3,
    "You are a tool-using agent working in a small workshop; think before you act. " + " ".join(WORDS[8:]) * 3,
]

# What a client does next, and how often.
KINDS = {
    "chat_stream": 28,          # read to the end
    "chat": 12,
    "completion_stream": 8,
    "completion": 8,
    "hangup_mid_stream": 18,    # read some events, then close (or reset)
    "hangup_after_send": 8,     # send the whole request, close at once
    "hangup_waiting": 6,        # non-streaming: close while the answer is pending
    "hangup_mid_headers": 6,    # close inside the request head
    "hangup_mid_body": 6,       # close inside the body
}


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Client:
    """One client thread: requests back to back until the deadline, counting what happened."""

    def __init__(self, index, port, seed, deadline):
        self.index, self.port, self.deadline = index, port, deadline
        self.rng = random.Random(seed * 1000 + index)
        self.counts = {k: 0 for k in KINDS}
        self.completed = 0  # requests read to their end (incl. streams that ended before the hang-up)
        self.errors = []
        self.conversation = None  # (messages, answer) of the last chat, to continue it
        self.conn = None  # kept-alive connection for the complete requests
        self.conn_used = 0.0

    # --- request bodies -------------------------------------------------------------------------
    def chat_body(self, stream, long_answer=False):
        rng = self.rng
        if self.conversation and rng.random() < 0.35 and len(self.conversation[0]) < 9:
            messages, answer = self.conversation
            messages = messages + [{"role": "assistant", "content": answer or "ok"},
                                   {"role": "user", "content": "And " + words(rng, rng.randint(2, 12)) + "?"}]
        else:
            messages = [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)},
                        {"role": "user", "content": "Tell me about " + words(rng, rng.randint(1, 40)) + "."}]
        body = {"model": "tiny", "messages": messages, "stream": stream,
                "max_tokens": rng.randint(200, 400) if long_answer else rng.randint(1, 80),
                "temperature": rng.choice([0, 0.7, 1.0]), "seed": rng.randint(0, 1 << 30)}
        if stream and rng.random() < 0.8:
            body["stream_options"] = {"include_usage": True}
        if long_answer or rng.random() < 0.3:
            body["ignore_eos"] = True
        if rng.random() < 0.1:
            body["n"] = 2
        if rng.random() < 0.1:
            body["logprobs"], body["top_logprobs"] = True, rng.randint(0, 3)
        if rng.random() < 0.1:
            body["stop"] = [rng.choice(WORDS)]
        return body

    def completion_body(self, stream):
        rng = self.rng
        body = {"model": "tiny", "prompt": words(rng, rng.randint(1, 200)), "stream": stream,
                "max_tokens": rng.randint(1, 64), "temperature": rng.choice([0, 1.0]), "seed": rng.randint(0, 1 << 30)}
        if stream and rng.random() < 0.8:
            body["stream_options"] = {"include_usage": True}
        return body

    # --- transport ------------------------------------------------------------------------------
    def connection(self):
        # A kept-alive connection is reused only right after its last answer (the server closes idle
        # ones after min(5, --timeout) s); otherwise a fresh one.
        if self.conn is None or time.time() - self.conn_used > 1.0:
            if self.conn is not None:
                self.conn.close()
            self.conn = http.client.HTTPConnection(HOST, self.port, timeout=REQUEST_TIMEOUT)
        return self.conn

    def drop_connection(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @staticmethod
    def raw_request(path, body):
        data = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        return head, data

    def raw_socket(self):
        return socket.create_connection((HOST, self.port), timeout=REQUEST_TIMEOUT)

    @staticmethod
    def close_abruptly(sock, reset):
        if reset:  # SO_LINGER 0: close() sends a RST instead of a FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    # --- one request of each kind ---------------------------------------------------------------
    def run(self):
        kinds, weights = list(KINDS), list(KINDS.values())
        while time.time() < self.deadline:
            kind = self.rng.choices(kinds, weights)[0]
            self.counts[kind] += 1
            try:
                getattr(self, kind)()
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                self.errors.append(f"client {self.index} {kind}: {type(e).__name__}: {e}")
                self.drop_connection()
        self.drop_connection()

    def post(self, path, body):
        conn = self.connection()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return conn, resp

    def complete_request(self, path, body):
        conn, resp = self.post(path, body)
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
        if body["stream"]:
            events = read_events(resp)
            answer = check_stream(events, body, chat=path.endswith("chat/completions"), complete=True)
        else:
            answer = check_object(json.loads(resp.read()), body, chat=path.endswith("chat/completions"))
        self.conn_used = time.time()
        if resp.will_close:
            self.drop_connection()
        self.completed += 1
        return answer

    def chat_stream(self):
        body = self.chat_body(stream=True)
        answer = self.complete_request("/v1/chat/completions", body)
        self.conversation = (body["messages"], answer)

    def chat(self):
        body = self.chat_body(stream=False)
        answer = self.complete_request("/v1/chat/completions", body)
        self.conversation = (body["messages"], answer)

    def completion_stream(self):
        self.complete_request("/v1/completions", self.completion_body(stream=True))

    def completion(self):
        self.complete_request("/v1/completions", self.completion_body(stream=False))

    def hangup_mid_stream(self):
        chat = self.rng.random() < 0.75
        body = self.chat_body(stream=True, long_answer=True) if chat else dict(self.completion_body(stream=True), max_tokens=300, ignore_eos=True)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        keep = self.rng.randint(0, 12)  # events to read before hanging up
        reset = self.rng.random() < 0.5
        self.drop_connection()
        conn = http.client.HTTPConnection(HOST, self.port, timeout=REQUEST_TIMEOUT)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
            events = read_events(resp, limit=keep)
            done = bool(events) and events[-1] == "[DONE]"
            check_stream(events, body, chat=chat, complete=done)
            if done:
                self.completed += 1
            if reset and conn.sock is not None:
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            conn.close()

    def hangup_after_send(self):
        stream = self.rng.random() < 0.5
        head, data = self.raw_request("/v1/chat/completions", self.chat_body(stream=stream, long_answer=True))
        sock = self.raw_socket()
        sock.sendall(head + data)
        self.close_abruptly(sock, reset=self.rng.random() < 0.5)

    def hangup_waiting(self):
        head, data = self.raw_request("/v1/chat/completions", self.chat_body(stream=False, long_answer=True))
        sock = self.raw_socket()
        sock.sendall(head + data)
        time.sleep(self.rng.uniform(0.05, 0.6))
        self.close_abruptly(sock, reset=self.rng.random() < 0.5)

    def hangup_mid_headers(self):
        head, _ = self.raw_request("/v1/chat/completions", self.chat_body(stream=True))
        sock = self.raw_socket()
        sock.sendall(head[:self.rng.randint(1, len(head) - 3)])
        time.sleep(self.rng.uniform(0, 0.2))
        self.close_abruptly(sock, reset=self.rng.random() < 0.5)

    def hangup_mid_body(self):
        head, data = self.raw_request("/v1/chat/completions", self.chat_body(stream=self.rng.random() < 0.5))
        sock = self.raw_socket()
        sock.sendall(head + data[:self.rng.randint(0, len(data) - 1)])
        time.sleep(self.rng.uniform(0, 0.2))
        self.close_abruptly(sock, reset=self.rng.random() < 0.5)


def read_events(resp, limit=None):
    """SSE events of a response (the JSON objects, and the string "[DONE]"), up to `limit` events."""
    events, buf = [], b""
    while limit is None or len(events) < limit:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf and (limit is None or len(events) < limit):
            event, buf = buf.split(b"\n\n", 1)
            line = event.decode()
            if not line.startswith("data: "):
                raise RuntimeError(f"not an SSE data line: {line[:100]!r}")
            data = line[6:]
            if events and events[-1] == "[DONE]":
                raise RuntimeError(f"event after [DONE]: {data[:100]!r}")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


FINISH = ("stop", "length", "tool_calls")


def check_usage(usage, body, choices):
    if not (isinstance(usage, dict) and usage.get("prompt_tokens", 0) > 0
            and 1 <= usage.get("completion_tokens", 0) <= body["max_tokens"] * choices
            and usage.get("total_tokens") == usage["prompt_tokens"] + usage["completion_tokens"]):
        raise RuntimeError(f"bad usage {usage} (max_tokens {body['max_tokens']}, n {choices})")


def check_stream(events, body, chat, complete):
    """Raises unless `events` are a well-formed stream (complete) or prefix of one; returns choice 0's text."""
    n = body.get("n", 1)
    obj = "chat.completion.chunk" if chat else "text_completion"
    ids, roles, finished, text, usage = set(), set(), {}, "", None
    for i, e in enumerate(events):
        if e == "[DONE]":
            continue
        if "error" in e:
            raise RuntimeError(f"error event: {e['error']}")
        if e.get("object") != obj:
            raise RuntimeError(f"event {i}: object {e.get('object')!r}, expected {obj}")
        ids.add(e.get("id"))
        if e.get("usage"):
            if e.get("choices") != [] or usage is not None:
                raise RuntimeError(f"event {i}: a usage chunk with choices, or two of them")
            usage = e["usage"]
            continue
        if usage is not None:
            raise RuntimeError(f"event {i}: a chunk after the usage chunk")
        for ch in e.get("choices", []):
            idx = ch.get("index")
            if not isinstance(idx, int) or not 0 <= idx < n:
                raise RuntimeError(f"event {i}: choice index {idx!r}")
            if idx in finished:
                raise RuntimeError(f"event {i}: choice {idx} goes on after its finish_reason")
            if chat:
                delta = ch.get("delta")
                if not isinstance(delta, dict):
                    raise RuntimeError(f"event {i}: no delta")
                if "role" in delta:
                    if idx in roles or delta["role"] != "assistant":
                        raise RuntimeError(f"event {i}: role delta {delta!r} twice or wrong")
                    roles.add(idx)
                elif idx not in roles:
                    raise RuntimeError(f"event {i}: a delta before the role delta")
                piece = delta.get("content") or ""
            else:
                piece = ch.get("text")
                if not isinstance(piece, str):
                    raise RuntimeError(f"event {i}: text is not a string")
            if idx == 0:
                text += piece
            if ch.get("finish_reason") is not None:
                if ch["finish_reason"] not in FINISH:
                    raise RuntimeError(f"event {i}: finish_reason {ch['finish_reason']!r}")
                finished[idx] = ch["finish_reason"]
    if len(ids) > 1:
        raise RuntimeError(f"several ids in one stream: {sorted(map(str, ids))[:3]}")
    if complete:
        if not events or events[-1] != "[DONE]" or events.count("[DONE]") != 1:
            raise RuntimeError("stream does not end with one [DONE]")
        if len(finished) != n:
            raise RuntimeError(f"{len(finished)} finish_reasons for n = {n}")
        if chat and len(roles) != n:
            raise RuntimeError(f"{len(roles)} role deltas for n = {n}")
        wants_usage = body.get("stream_options", {}).get("include_usage", False)
        if wants_usage != (usage is not None):
            raise RuntimeError(f"usage chunk {'missing' if wants_usage else 'not asked for'}")
        if usage is not None:
            check_usage(usage, body, n)
    return text


def check_object(r, body, chat):
    """Raises unless `r` is a well-formed non-streaming answer; returns choice 0's text."""
    n = body.get("n", 1)
    if r.get("object") != ("chat.completion" if chat else "text_completion"):
        raise RuntimeError(f"object {r.get('object')!r}")
    choices = r.get("choices")
    if not isinstance(choices, list) or sorted(c.get("index") for c in choices) != list(range(n)):
        raise RuntimeError(f"choices {str(choices)[:200]}")
    for c in choices:
        if c.get("finish_reason") not in FINISH:
            raise RuntimeError(f"finish_reason {c.get('finish_reason')!r}")
        if chat:
            m = c.get("message", {})
            if m.get("role") != "assistant" or not (m.get("content") is None or isinstance(m.get("content"), str)):
                raise RuntimeError(f"message {str(m)[:200]}")
        elif not isinstance(c.get("text"), str):
            raise RuntimeError("text is not a string")
    check_usage(r.get("usage"), body, n)
    first = next(c for c in choices if c["index"] == 0)
    return (first["message"].get("content") or "") if chat else first["text"]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def labelled_metrics(port):
    """m3_requests_total{endpoint, status} as {(endpoint, status): count}."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for m in re.finditer(r'^m3_requests_total\{endpoint="([^"]*)",status="(\d+)"\} (\S+)$', text, re.M):
        out[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return out


def healthy(port):
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        conn.request("GET", "/health")
        r = conn.getresponse()
        ok = r.status == 200 and json.loads(r.read()) == {"status": "ok"}
        conn.close()
        return ok
    except (OSError, ValueError):
        return False


def large_bodies(port, pid, sizes=(7 << 20, 3 << 20, 6 << 20, 5 << 20), clients=16):
    """Rounds of `clients` concurrent bodies of each size in `sizes` (a valid request plus an unknown
    field holding the padding, so each is a 400 after parsing). Returns (RSS before, RSS after in
    KiB, statuses that were not 400)."""
    def one(size, out):
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "x_padding": "a" * size})
        conn = http.client.HTTPConnection(HOST, port, timeout=REQUEST_TIMEOUT)
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 400:
                out.append(r.status)
        except OSError as e:
            out.append(repr(e))
        finally:
            conn.close()

    time.sleep(1)
    before, bad = rss_kib(pid), []
    for size in sizes:
        threads = [threading.Thread(target=one, args=(size - 4096 * i, bad)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    time.sleep(1)
    return before, rss_kib(pid), bad


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=90, help="load duration (default 90)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=4, help="the server's --parallel")
    ap.add_argument("--cache-mb", type=int, default=4, help="the server's --cache-mb")
    ap.add_argument("--warmup", type=float, help="seconds of load before RSS must be flat (default: max(30, 10%%))")
    ap.add_argument("--window", type=float, help="RSS window compared, first and last (default: max(10, 5%%))")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--server-arg", action="append", default=[], help="extra m3 serve argument (repeatable)")
    ap.add_argument("--report", help="write the summary as JSON here")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else max(30.0, 0.1 * args.seconds)
    window = args.window if args.window is not None else max(10.0, 0.05 * args.seconds)
    if warmup + 2 * window > args.seconds:
        sys.exit(f"--seconds {args.seconds} is too short for warm-up {warmup} s and two {window} s windows")

    scratch = os.environ.get("M3_SCRATCH") or tempfile.mkdtemp(prefix="m3-soak-")
    os.makedirs(scratch, exist_ok=True)
    check = server_client.Checks("server-soak")
    model = os.path.join(scratch, "tiny")
    if not os.path.exists(os.path.join(model, "config.json")):
        server_client.make_checkpoint(M3, "tiny", 1, model)
    log_path = os.path.join(scratch, "serve.log")
    server_args = ["-t", "2", "--parallel", str(args.parallel), "--cache-mb", str(args.cache_mb), "--ctx", "4096",
                   "--timeout", "10", *args.server_arg]
    proc, port = server_client.start_server(M3, model, server_args, log_path)
    print(f"# m3 serve {' '.join(server_args)} (pid {proc.pid}, port {port}); {args.clients} clients for "
          f"{args.seconds:.0f} s, warm-up {warmup:.0f} s, RSS windows {window:.0f} s", flush=True)
    budget = args.cache_mb << 20
    try:
        t0 = time.time()
        deadline = t0 + args.seconds
        clients = [Client(i, port, args.seed, deadline) for i in range(args.clients)]
        threads = [threading.Thread(target=c.run, daemon=True) for c in clients]
        for t in threads:
            t.start()

        rss, cache_samples, next_metrics = [], [], t0
        while time.time() < deadline:
            now = time.time()
            if proc.poll() is not None:
                break
            rss.append((now - t0, rss_kib(proc.pid)))
            if now >= next_metrics:
                m = server_client.get_metrics(HOST, port)
                cache_samples.append(m.get("m3_prefix_cache_bytes", 0))
                next_metrics = now + 5
                done = sum(c.completed for c in clients)
                print(f"# t={now - t0:5.0f} s  RSS {rss[-1][1] / 1024:6.1f} MiB  completed {done}  "
                      f"cache {cache_samples[-1] / 2**20:5.2f} MiB  running {m.get('m3_requests_running', -1):.0f}  "
                      f"queued {m.get('m3_queue_length', -1):.0f}", flush=True)
            time.sleep(max(0.0, 1.0 - (time.time() - now)))
        load_end = time.time() - t0
        for t in threads:
            t.join(timeout=REQUEST_TIMEOUT + 60)
        stuck = sum(t.is_alive() for t in threads)

        check(proc.poll() is None, f"server alive after the load (exit status {proc.poll()})")
        check(stuck == 0, f"every client ended its last request ({stuck} stuck)")
        errors = [e for c in clients for e in c.errors]
        counts = {k: sum(c.counts[k] for c in clients) for k in KINDS}
        completed = sum(c.completed for c in clients)
        hangups = sum(v for k, v in counts.items() if k.startswith("hangup"))
        print("# requests by kind: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        check(not errors, f"zero unexpected errors in {sum(counts.values())} requests ({len(errors)}: {errors[:3]})")
        check(all(counts[k] > 0 for k in KINDS), "every kind of request and hang-up happened at least once")
        print(f"# {completed} requests read to their end, {hangups} hang-ups")

        # The engine retires a cancelled sequence after its current step, and a request whose client
        # left while it was being parsed may still be submitted: wait (boundedly) for idle gauges
        # that stay idle for half a second.
        m, idle_polls = {}, 0
        for _ in range(300):
            m = server_client.get_metrics(HOST, port)
            idle = m.get("m3_requests_running", -1) == 0 and m.get("m3_queue_length", -1) == 0
            idle_polls = idle_polls + 1 if idle else 0
            if idle_polls >= 5:
                break
            time.sleep(0.1)
        check(m.get("m3_requests_running", -1) == 0 and m.get("m3_queue_length", -1) == 0,
              f"/metrics: nothing running or queued at the end (running {m.get('m3_requests_running')}, "
              f"queued {m.get('m3_queue_length')})")
        check(m.get("m3_cancelled_total", 0) > 0, f"hang-ups cancelled generations (m3_cancelled_total {m.get('m3_cancelled_total')})")
        cache_samples.append(m.get("m3_prefix_cache_bytes", 0))
        check(max(cache_samples) <= budget,
              f"prefix cache within --cache-mb {args.cache_mb} in all {len(cache_samples)} samples (max {max(cache_samples) / 2**20:.2f} MiB)")
        statuses = labelled_metrics(port)
        server_errors = {k: v for k, v in statuses.items() if k[1] >= 500}
        check(not server_errors, f"the server counted no 5xx answers {server_errors}")
        big_before, big_after, big_bad = large_bodies(port, proc.pid)
        check(not big_bad, f"64 large bodies (3-7 MiB) each answered 400 {big_bad[:3]}")
        check(big_after <= 1.10 * big_before,
              f"RSS after the large bodies {big_after / 1024:.1f} MiB, before them {big_before / 1024:.1f} MiB (limit +10%)")
        check(healthy(port), "the server still answers /health")

        after = [kib for t, kib in rss if t >= warmup]
        first = [kib for t, kib in rss if warmup <= t < warmup + window]
        last = [kib for t, kib in rss if load_end - window <= t]
        ratio = mean(last) / mean(first) if first and last else float("nan")
        check(len(first) >= window / 2 and len(last) >= window / 2 and abs(ratio - 1) <= 0.10,
              f"RSS flat after warm-up: mean of the last {window:.0f} s {mean(last) / 1024:.1f} MiB, of the first "
              f"{window:.0f} s after warm-up {mean(first) / 1024:.1f} MiB (x{ratio:.3f}, limit 10%)")
        summary = {
            "seconds": args.seconds, "clients": args.clients, "server_args": server_args, "seed": args.seed,
            "requests": sum(counts.values()), "by_kind": counts, "completed": completed, "hangups": hangups,
            "errors": len(errors), "error_examples": errors[:10],
            "rss_mib": {"start": rss[0][1] / 1024, "warmup_end_window_mean": mean(first) / 1024,
                        "last_window_mean": mean(last) / 1024, "ratio": ratio,
                        "min_after_warmup": min(after) / 1024, "max_after_warmup": max(after) / 1024,
                        "max": max(k for _, k in rss) / 1024, "samples": len(rss),
                        "every_10s": [round(k / 1024, 1) for t, k in rss[::10]]},
            "large_bodies_rss_mib": [big_before / 1024, big_after / 1024],
            "prefix_cache_max_mib": max(cache_samples) / 2**20, "cache_budget_mib": args.cache_mb,
            "metrics_end": {k: v for k, v in m.items() if k.startswith("m3_")},
            "requests_total": {f"{e} {s}": v for (e, s), v in sorted(statuses.items())},
        }
        print("# " + json.dumps({k: summary[k] for k in ("requests", "completed", "hangups", "errors", "rss_mib")}))
        if args.report:
            with open(args.report, "w") as f:
                json.dump(summary, f, indent=1)
    finally:
        server_client.stop_servers([proc])
    check.finish()


if __name__ == "__main__":
    main()
