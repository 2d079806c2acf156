#!/usr/bin/env python3
"""HTTP/1.1 framing of `m3 serve` against hostile and unusual clients (RFC 9112; issue 14 item 2),
over raw loopback sockets: body limits on the decoded bytes of chunked and gzip bodies (413 while
the server's memory stays small), malformed chunked framing (400), a body without Content-Length or
Transfer-Encoding (HTTP/1.1: empty, answered at once; HTTP/1.0: 400), pipelined requests answered in
order, the per-request read deadline (slowloris), Content-Encoding, the API key on pipelined
requests, and the 413/414/431 limits. After each case the server must still answer /health.
Timeouts here only detect hangs; nothing is timed."""
import gzip
import json
import os
import socket
import sys
import threading
import zlib

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-http")

KEY = "sekrit"
TIMEOUT = 20       # the server's --timeout (seconds)
HANG = 10          # "answered at once": well before the server's own timeout could have ended a wait
LIMIT = 8 << 20    # the default --max-body-bytes
AUTH = f"Authorization: Bearer {KEY}\r\n".encode()


class Reader:
    """Reads HTTP/1.1 responses off one socket, keeping what follows a response for the next."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _more(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, headers with lower-case names, body); 1xx interim responses are skipped."""
        while True:
            status = int(self._line().split(b" ")[1])
            headers = {}
            while True:
                line = self._line()
                if not line:
                    break
                k, v = line.split(b":", 1)
                headers[k.decode().lower()] = v.decode().strip()
            if status >= 200:
                break
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                body += self._exact(size)
                self._exact(2)
        elif "content-length" in headers:
            body = self._exact(int(headers["content-length"]))
        else:  # until the server closes (HTTP/1.0 stream)
            try:
                while True:
                    self._more()
            except EOFError:
                pass
            body, self.buf = self.buf, b""
        return status, headers, body

    def closed(self):
        """True when the server has closed the connection (after what it sent, if anything)."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def connect(timeout=HANG):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s, Reader(s)


def exchange(raw, timeout=HANG):
    """Sends raw bytes on a new connection; the first response, or (None, error) when none came."""
    s, r = connect(timeout)
    try:
        s.sendall(raw)
        st, h, b = r.response()
        return st, h, b
    except (OSError, EOFError) as e:
        return None, {}, repr(e).encode()
    finally:
        s.close()


def error_code(body):
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def post(path, body, extra=b"", version=b"1.1"):
    return (b"POST " + path + b" HTTP/" + version + b"\r\nHost: 127.0.0.1\r\n" + AUTH +
            b"Content-Type: application/json\r\n" + extra + b"Content-Length: " + str(len(body)).encode() +
            b"\r\n\r\n" + body)


def healthy(after):
    st, _, b = exchange(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    check(st == 200 and json.loads(b) == {"status": "ok"}, f"/health answers after {after}")


def reset_peak_rss():
    """Resets the server's VmHWM (Linux >= 4.0), so each measurement sees only its own peak."""
    with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
        f.write("5")


def memory_kib(field):
    with open(f"/proc/{proc.pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


completion = json.dumps({"prompt": "Hello there", "max_tokens": 4, "temperature": 0}).encode()
chat = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}).encode()

model = os.path.join(SCRATCH, "tiny")
server_client.make_checkpoint(M3, "tiny", 7, model)
proc, port = server_client.start_server(M3, model, ["-t", "2", "--timeout", str(TIMEOUT), "--api-key", KEY],
                                        os.path.join(SCRATCH, "server.log"))
try:
    # --- A 100 MiB chunked body: refused once the decoded bytes pass the limit, never buffered whole.
    reset_peak_rss()
    hwm_before = memory_kib("VmHWM")
    s, r = connect(timeout=60)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH +
              b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    sent = [0]

    def send_chunks():
        piece = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
        try:
            for _ in range(100):
                s.sendall(piece)
                sent[0] += 1
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server stopped reading: expected

    sender = threading.Thread(target=send_chunks)
    sender.start()
    try:
        st, _, b = r.response()
    except (OSError, EOFError) as e:
        st, b = None, repr(e).encode()
    sender.join(60)
    s.close()
    grew = (memory_kib("VmHWM") - hwm_before) / 1024
    check(st == 413 and error_code(b) == "request_too_large",
          f"100 MiB chunked body: 413 request_too_large (got {st} {b[:120]!r}; {sent[0]} MiB sent)")
    check(grew < 48, f"the chunked body was not buffered: peak RSS grew {grew:.1f} MiB (limit 8 MiB)")
    healthy("the 100 MiB chunked body")

    st, _, b = exchange(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH +
                        b"Content-Length: 104857600\r\n\r\n{")
    check(st == 413 and error_code(b) == "request_too_large", f"Content-Length over the limit: 413 at the header (got {st})")

    # --- Chunked framing.
    good = b"%x\r\n" % 5 + completion[:5] + b"\r\n" + b"%x\r\n" % (len(completion) - 5) + completion[5:] + b"\r\n0\r\n\r\n"
    head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n\r\n"
    st, _, b = exchange(head + good)
    check(st == 200 and json.loads(b)["object"] == "text_completion", f"a well-formed chunked body is decoded (got {st} {b[:120]!r})")
    # The data is a valid body: only the framing is wrong, so a lenient parser would answer 200.
    st, _, b = exchange(head + b"%x\r\n" % len(completion) + completion + b"0\r\n\r\n")
    check(st == 400 and error_code(b) == "bad_request", f"a chunk without the CRLF after its data: 400 (got {st} {b[:120]!r})")
    healthy("the chunk without its CRLF")
    st, _, b = exchange(head + b"zz\r\nhello\r\n0\r\n\r\n")
    check(st == 400 and error_code(b) == "bad_request", f"a chunk size that is not hex: 400 (got {st})")
    st, _, b = exchange(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH +
                        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + good)
    check(st == 400, f"both Content-Length and Transfer-Encoding (request smuggling): 400 (got {st})")
    st, _, b = exchange(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH +
                        b"Transfer-Encoding: gzip\r\n\r\n" + completion)
    check(st == 400, f"Transfer-Encoding without chunked last: 400 (got {st})")
    healthy("the malformed chunked requests")

    # --- Content-Encoding: inflated under the same cap on decoded bytes.
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    bomb = b"".join(comp.compress(zeros) for _ in range(256)) + comp.flush()
    reset_peak_rss()
    hwm_before = memory_kib("VmHWM")
    st, _, b = exchange(post(b"/v1/chat/completions", bomb, b"Content-Encoding: gzip\r\n"), timeout=60)
    grew = (memory_kib("VmHWM") - hwm_before) / 1024
    check(st == 413 and error_code(b) == "request_too_large",
          f"a {len(bomb) // 1024} KiB gzip body that inflates to 256 MiB: 413 (got {st} {b[:160]!r})")
    check(grew < 48, f"the gzip bomb was not inflated whole: peak RSS grew {grew:.1f} MiB")
    healthy("the gzip bomb")
    st, _, b = exchange(post(b"/v1/chat/completions", gzip.compress(chat), b"Content-Encoding: gzip\r\n"))
    check(st == 200 and json.loads(b)["object"] == "chat.completion", f"a gzip chat body is inflated and answered (got {st})")
    st, _, b = exchange(post(b"/v1/completions", zlib.compress(completion), b"Content-Encoding: deflate\r\n"))
    check(st == 200 and json.loads(b)["object"] == "text_completion", f"a deflate (zlib) body is inflated and answered (got {st})")
    st, _, b = exchange(post(b"/v1/completions", gzip.compress(completion)[:-8], b"Content-Encoding: gzip\r\n"))
    check(st == 400, f"truncated gzip data: 400 (got {st})")
    st, h, b = exchange(post(b"/v1/completions", completion, b"Content-Encoding: br\r\n"))
    check(st == 415 and "gzip" in h.get("accept-encoding", ""), f"an unsupported Content-Encoding: 415 with Accept-Encoding (got {st})")
    healthy("the Content-Encoding cases")

    # --- No Content-Length, no Transfer-Encoding.
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH + b"Content-Type: application/json\r\n\r\n" + completion)
    st, _, b = exchange(raw)
    check(st == 400 and error_code(b) == "invalid_json",
          f"HTTP/1.1 POST without Content-Length: its body is empty, answered at once (got {st} {b[:120]!r})")
    healthy("the HTTP/1.1 body without Content-Length")
    s, r = connect()
    s.sendall(b"POST /v1/completions HTTP/1.0\r\n" + AUTH + b"Content-Type: application/json\r\n\r\n" + completion)
    try:
        st, _, b = r.response()
    except (OSError, EOFError) as e:
        st, b = None, repr(e).encode()
    check(st == 400, f"HTTP/1.0 POST with a body but no Content-Length: 400, answered at once (got {st} {b[:120]!r})")
    check(r.closed(), "and the connection is closed")
    s.close()
    st, _, b = exchange(post(b"/v1/completions", completion, version=b"1.0"))
    check(st == 200 and json.loads(b)["object"] == "text_completion", f"HTTP/1.0 POST with Content-Length works (got {st})")
    healthy("the HTTP/1.0 requests")

    # --- Pipelining: several requests in one write, answered in order on the same connection.
    s, r = connect(timeout=60)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + post(b"/v1/completions", completion) +
              b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH + b"\r\n")
    answers = []
    try:
        for _ in range(3):
            answers.append(r.response())
    except (OSError, EOFError) as e:
        answers.append((None, {}, repr(e).encode()))
    kinds = [(a[0], json.loads(a[2]).get("status") or json.loads(a[2]).get("object")) if a[0] else (None, a[2][:80])
             for a in answers]
    check(kinds == [(200, "ok"), (200, "text_completion"), (200, "list")],
          f"three pipelined requests: three answers in order (got {kinds})")
    # A stream, a request without the key and /health, pipelined on the same connection.
    s.sendall(post(b"/v1/chat/completions", json.dumps(dict(json.loads(chat), stream=True)).encode()) +
              b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        st1, h1, b1 = r.response()
        st2, _, b2 = r.response()
        st3, _, b3 = r.response()
    except (OSError, EOFError) as e:
        st1 = st2 = st3 = None
        h1, b1, b2, b3 = {}, repr(e).encode(), b"", b""
    check(st1 == 200 and h1.get("content-type", "").startswith("text/event-stream") and b1.endswith(b"data: [DONE]\n\n"),
          f"a pipelined SSE stream is answered whole (got {st1} {b1[-60:]!r})")
    check(st2 == 401 and error_code(b2) == "invalid_api_key" and st3 == 200,
          f"after it, a pipelined request without the API key gets 401 and /health 200 (got {st2}, {st3})")
    s.close()
    healthy("the pipelined requests")

    # --- Limits that held before: path length (414), header size (431), per-request deadline.
    st, _, b = exchange(b"GET /" + b"a" * (100 << 10) + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    check(st == 414, f"a 100 KiB path: 414 (got {st})")
    st, _, b = exchange(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
    check(st == 431, f"a 1 MiB header: 431 (got {st})")
    st, _, b = exchange(b"GET /v1/models HTTP/1.1\r\n\r\n")
    check(st == 400, f"HTTP/1.1 without Host: 400 (got {st})")
    st, _, b = exchange(b"NOT HTTP AT ALL\r\n\r\n")
    check(st == 400, f"garbage: 400 (got {st})")
    healthy("the limits")

    # Slowloris: a header sent one byte a second never completes; the request deadline (--timeout)
    # cuts it off although every single read is quick. A body trickled the same way too.
    for what, start, trickle in (("header", b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Slow: " + b"a" * 200),
                                 ("body", post(b"/v1/completions", b"x" * 500)[:-500], b"x" * 200)):
        s, r = connect(timeout=1)
        s.sendall(start)
        cut = False
        for i in range(3 * TIMEOUT):  # bounded: up to three times the deadline
            try:
                s.sendall(trickle[i:i + 1])
            except OSError:
                cut = True
                break
            if r.closed():
                cut = True
                break
        s.close()
        check(cut, f"slowloris ({what} one byte a second): the connection is cut by the request deadline")
        healthy(f"the slowloris {what}")
    check(proc.poll() is None, "server alive at the end")
finally:
    server_client.stop_servers([proc])

check.finish()
