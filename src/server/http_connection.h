#pragma once
// HTTP/1.1 message framing for `m3 serve` (RFC 9112), on Boost.Beast: reading requests under
// limits and deadlines, writing whole and streamed responses, keep-alive and pipelining. It knows
// nothing of the API; a handler (http_server.cpp) routes each request. docs/SERVER.md, "HTTP".
//
// Beast stays inside http_connection.cpp: this header is all the rest of the server sees.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace m3::server {

struct HttpLimits {
  size_t max_body_bytes = 8u << 20;     // decoded body (after chunked and Content-Encoding): 413 beyond
  size_t max_header_bytes = 64u << 10;  // request line + header fields: 431 beyond (414 if the line alone is)
  size_t max_target_bytes = 8192;       // request target: 414 beyond
  int timeout_seconds = 60;             // to read one request from its first byte, and to write each piece of a response
  int idle_seconds = 5;                 // a kept-alive connection waits this long for its next request
  int max_connections = 32;             // served at once (one thread each); more wait in the listen backlog
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method, target;
  std::string path;  // the target up to '?'
  int version = 11;  // 10 or 11
  HttpHeaders headers;
  std::string body;  // decoded: chunked framing and Content-Encoding removed
  // The value of a header (names compare case-insensitively); empty when absent.
  std::string header(std::string_view name) const;
};

class Connection;

// How a handler answers its request: one whole response, or a stream (SSE over chunked encoding).
// Every call returns false once the client is gone or stalls past the write timeout.
class HttpResponder {
 public:
  explicit HttpResponder(Connection& c) : c_(c) {}
  bool send(int status, std::string_view content_type, std::string_view body, const HttpHeaders& extra = {});
  bool begin_stream(int status, std::string_view content_type, const HttpHeaders& extra = {});
  bool write_stream(std::string_view data);
  bool end_stream();
  // True once the client has closed or reset its connection; never blocks. More data from it (a
  // pipelined request) is not a close.
  bool peer_closed() const;
  // Header fields added to whatever this request's response turns out to be (CORS).
  void add_header(std::string name, std::string value) { always_.emplace_back(std::move(name), std::move(value)); }
  // What the access log line adds about this request (tokens, time to first token).
  void set_log_note(std::string note);

 private:
  HttpHeaders with_always(const HttpHeaders& extra) const;
  Connection& c_;
  HttpHeaders always_;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;
// One line of the access log: called once per response (framing errors too, where method and path
// are "-" when unknown), after it was written.
struct HttpLogEntry {
  std::string method, path;
  int status = 0;
  double seconds = 0;  // from the request's first byte to the end of the response
  std::string note;    // HttpResponder::set_log_note
};
using HttpLogger = std::function<void(const HttpLogEntry&)>;

class HttpListener {
 public:
  // Binds host:port (port 0: any free one). Throws m3::Error when it cannot.
  HttpListener(const std::string& host, int port, const HttpLimits& limits);
  ~HttpListener();
  int port() const;
  // Accepts and serves connections until stop(); then returns at once (connections already
  // accepted go on in their threads: the caller waits for what it must).
  void serve(HttpHandler handler, HttpLogger logger);
  // From any thread (a signal thread): no connection is accepted after this; serve() returns.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True once the peer of this connected socket has closed or reset it (never blocks).
bool socket_peer_closed(int fd);

}  // namespace m3::server
