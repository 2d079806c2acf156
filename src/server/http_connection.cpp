#include "server/http_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <semaphore>
#include <thread>

#include "m3/error.h"
#include "server/api_error.h"
#include "server/content_coding.h"
#include "server/header_text.h"

namespace m3::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::string error_json(const std::string& message, const std::string& code) {
  return error_body(message, "invalid_request_error", {}, code).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

bool socket_peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, short(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// One client connection, served on its own thread. Requests are parsed one after the other out of
// one buffer, so pipelined requests wait there for their turn and are answered in order. Every
// read and write is an asynchronous Beast operation run to completion on this thread under the
// stream's deadline: that is how a stalled client is cut off (Beast's synchronous calls have none).
class Connection {
 public:
  Connection(const HttpLimits& limits, const HttpHandler& handler, const HttpLogger& logger)
      : lim_(limits), handler_(handler), logger_(logger) {}

  tcp::socket& socket() { return stream_.socket(); }

  void serve() {
    fd_ = stream_.socket().native_handle();
    beast::error_code ignored;
    stream_.socket().set_option(tcp::no_delay(true), ignored);  // SSE: one small write per token
    bool first = true;
    while (open_) {
      if (buffer_.size() == 0) {
        // Wait for the next request to begin; an idle kept-alive connection goes sooner.
        stream_.expires_after(std::chrono::seconds(first ? lim_.timeout_seconds : lim_.idle_seconds));
        size_t n = 0;
        if (run_op([&](auto h) { stream_.async_read_some(buffer_.prepare(16 << 10), h); }, &n)) return;
        buffer_.commit(n);
      }
      first = false;
      // From its first byte, the whole request (header, 100-continue, body) must arrive in time.
      stream_.expires_after(std::chrono::seconds(lim_.timeout_seconds));
      serve_one();
    }
  }

  bool send(int status, std::string_view content_type, std::string_view body, const HttpHeaders& extra) {
    if (responded_) return false;
    responded_ = true;
    status_ = status;
    http::response<http::string_body> res;
    res.result(unsigned(status));
    res.version(11);
    res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    for (const auto& [k, v] : extra) res.set(k, v);
    res.keep_alive(keep_alive_);
    res.body() = std::string(body);
    res.prepare_payload();
    stream_.expires_after(std::chrono::seconds(lim_.timeout_seconds));
    if (run_op([&](auto h) { http::async_write(stream_, res, h); })) return fail();
    return true;
  }

  bool begin_stream(int status, std::string_view content_type, const HttpHeaders& extra) {
    if (responded_) return false;
    responded_ = streaming_ = true;
    status_ = status;
    // HTTP/1.0 has no chunked coding: its stream is the rest of the connection.
    chunked_ = version_ == 11;
    if (!chunked_) keep_alive_ = false;
    http::response<http::empty_body> res;
    res.result(unsigned(status));
    res.version(11);
    res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    for (const auto& [k, v] : extra) res.set(k, v);
    res.keep_alive(keep_alive_);
    if (chunked_) res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    stream_.expires_after(std::chrono::seconds(lim_.timeout_seconds));
    if (run_op([&](auto h) { http::async_write_header(stream_, sr, h); })) return fail();
    return true;
  }

  bool write_stream(std::string_view data) {
    if (!streaming_ || stream_ended_ || !open_) return false;
    if (data.empty()) return true;  // an empty chunk would end the stream
    stream_.expires_after(std::chrono::seconds(lim_.timeout_seconds));
    const net::const_buffer b(data.data(), data.size());
    beast::error_code ec = chunked_ ? run_op([&](auto h) { net::async_write(stream_, http::make_chunk(b), h); })
                                    : run_op([&](auto h) { net::async_write(stream_, b, h); });
    if (ec) return fail();
    return true;
  }

  bool end_stream() {
    if (!streaming_ || stream_ended_ || !open_) return false;
    stream_ended_ = true;
    if (!chunked_) return true;  // closing the connection ends it
    stream_.expires_after(std::chrono::seconds(lim_.timeout_seconds));
    if (run_op([&](auto h) { net::async_write(stream_, http::make_chunk_last(), h); })) return fail();
    return true;
  }

  bool peer_closed() const { return socket_peer_closed(fd_); }

 private:
  // Runs one asynchronous operation to its end on this thread, bounded by the stream's deadline
  // (on expiry Beast closes the socket and the operation ends with error::timeout).
  template <class Start>
  beast::error_code run_op(Start&& start, size_t* bytes = nullptr) {
    beast::error_code result;
    start([&](beast::error_code ec, std::size_t n) {
      result = ec;
      if (bytes) *bytes = n;
    });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  bool fail() {
    open_ = false;
    return false;
  }

  // Reads one request and answers it; clears open_ when the connection must end.
  void serve_one() {
    http::request_parser<http::string_body> parser;
    parser.header_limit(std::uint32_t(std::min<size_t>(lim_.max_header_bytes, UINT32_MAX)));
    // Beast counts decoded bytes against this limit: a Content-Length over it fails at the
    // header, a chunked body as soon as a chunk would pass it, before it is stored.
    parser.body_limit(std::uint64_t(lim_.max_body_bytes));
    responded_ = streaming_ = stream_ended_ = chunked_ = false;
    method_ = path_ = "-";
    status_ = 0;
    note_.clear();

    if (!read_request_line()) return;
    started_ = std::chrono::steady_clock::now();
    beast::error_code ec = run_op([&](auto h) { http::async_read_header(stream_, buffer_, parser, h); });
    if (ec) {
      // The request line is parsed before the fields: the access log can name what was refused.
      if (!parser.get().method_string().empty()) {
        method_ = std::string(parser.get().method_string());
        path_ = std::string(parser.get().target().substr(0, parser.get().target().find('?')));
      }
      return framing_error(ec);
    }
    HttpRequest req;
    {
      const auto& m = parser.get();
      req.method = std::string(m.method_string());
      req.target = std::string(m.target());
      req.version = int(m.version());
      for (const auto& f : m) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      keep_alive_ = m.keep_alive() && req.version == 11;
    }
    req.path = req.target.substr(0, req.target.find('?'));
    method_ = req.method;
    path_ = req.path;
    version_ = req.version;
    if (!check_header(req)) return;
    const ContentCoding coding = content_coding_of(req.header("Content-Encoding"));

    // A client that asked to be told before sending its body (curl does for large bodies).
    const std::string expect = lower_trimmed(req.header("Expect"));
    if (!expect.empty()) {
      if (expect != "100-continue")
        return void(refuse(417, "Expect: only 100-continue is supported", "expectation_failed"));
      if (req.version == 11 && !parser.is_done()) {
        static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (run_op([&](auto h) { net::async_write(stream_, net::buffer(kContinue, sizeof kContinue - 1), h); })) return void(fail());
      }
    }
    if (!parser.is_done()) {
      ec = run_op([&](auto h) { http::async_read(stream_, buffer_, parser, h); });
      if (ec) return framing_error(ec);
    }
    HttpResponder responder(*this);
    try {
      if (coding == ContentCoding::Identity)
        req.body = std::move(parser.get().body());
      else
        req.body = decode_content(coding, parser.get().body(), lim_.max_body_bytes);
    } catch (const ApiError& e) {
      send(e.status, "application/json", error_body(e).dump(-1, ' ', false, Json::error_handler_t::replace), {});
      return finish();
    }
    try {
      handler_(req, responder);
    } catch (const std::exception& e) {
      if (!responded_)
        send(500, "application/json",
             error_body(std::string("internal error: ") + e.what(), "server_error").dump(-1, ' ', false, Json::error_handler_t::replace), {});
      else
        open_ = false;
    }
    if (!responded_) send(500, "application/json", error_json("internal error: no response", "server_error"), {});
    if (streaming_ && !stream_ended_) open_ = false;  // a cut stream cannot be resumed
    finish();
  }

  // Reads until the buffer holds the whole request line. Beast would report a too long one as a
  // too large header (and consumes complete lines as it parses), so a too long target is told
  // apart here: 414 rather than 431.
  bool read_request_line() {
    // The method, spaces and "HTTP/1.1\r\n" around the target.
    const size_t max_line = lim_.max_target_bytes + 64;
    for (;;) {
      const auto d = buffer_.cdata();
      const std::string_view have(static_cast<const char*>(d.data()), d.size());
      const size_t eol = have.find('\n');
      if ((eol == std::string_view::npos ? have.size() : eol) > max_line)
        return refuse(414, str_cat("request target longer than ", lim_.max_target_bytes, " bytes"), "uri_too_long");
      if (eol != std::string_view::npos) return true;
      size_t n = 0;
      if (run_op([&](auto h) { stream_.async_read_some(buffer_.prepare(16 << 10), h); }, &n)) return fail();
      buffer_.commit(n);
    }
  }

  // Refuses what this server does not accept in a request's header (RFC 9112 §6).
  bool check_header(const HttpRequest& req) {
    if (req.target.size() > lim_.max_target_bytes)
      return refuse(414, str_cat("request target longer than ", lim_.max_target_bytes, " bytes"), "uri_too_long");
    if (req.version != 10 && req.version != 11) return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served", "http_version");
    const auto has = [&](std::string_view name) {
      return std::any_of(req.headers.begin(), req.headers.end(), [&](const auto& h) { return iequals(h.first, name); });
    };
    if (req.version == 11 && !has("Host"))
      return refuse(400, "HTTP/1.1 request without a Host header", "bad_request");
    const bool has_cl = has("Content-Length");
    if (has("Transfer-Encoding")) {
      const std::string te = lower_trimmed(req.header("Transfer-Encoding"));
      if (req.version == 10) return refuse(400, "Transfer-Encoding in an HTTP/1.0 request", "bad_request");
      // Without chunked last the body has no end but the connection's; with other codings
      // before it, it would need decoders this server does not have.
      if (!ends_with(te, "chunked")) return refuse(400, "Transfer-Encoding must end with chunked in a request", "bad_request");
      if (te != "chunked") return refuse(501, "Transfer-Encoding: only chunked is supported", "not_implemented");
    }
    // HTTP/1.0 has no chunked coding: a body needs Content-Length (RFC 1945 §7.2.2), or its end
    // could only be the connection's. HTTP/1.1 without either has an empty body (RFC 9112 §6.3).
    if (req.version == 10 && !has_cl && (req.method == "POST" || req.method == "PUT" || req.method == "PATCH"))
      return refuse(400, "an HTTP/1.0 request with a body needs Content-Length", "bad_request");
    if (content_coding_of(req.header("Content-Encoding")) == ContentCoding::Unsupported)
      return refuse(415, "Content-Encoding: only gzip and deflate are supported", "unsupported_content_encoding",
                    {{"Accept-Encoding", "gzip, deflate"}});
    return true;
  }

  // Answers a request whose bytes could not be read as HTTP, or were too many.
  void framing_error(const beast::error_code& ec) {
    if (ec == http::error::body_limit)
      return void(refuse(413, str_cat("request body larger than the limit of ", lim_.max_body_bytes, " bytes (--max-body-bytes)"),
                         "request_too_large"));
    if (ec == http::error::header_limit)
      return void(refuse(431, str_cat("request header larger than ", lim_.max_header_bytes, " bytes"), "header_too_large"));
    // The client left, reset or stalled (Beast closed the socket on its deadline): nobody to answer.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec.category() != http::make_error_code(http::error::bad_method).category())
      return void(fail());
    return void(refuse(400, "malformed HTTP request: " + ec.message(), "bad_request"));
  }
  bool refuse(int status, const std::string& message, const std::string& code, const HttpHeaders& extra = {}) {
    keep_alive_ = false;  // the rest of the stream cannot be trusted to start a request
    send(status, "application/json", error_json(message, code), extra);
    finish();
    return false;
  }

  void finish() {
    if (status_ != 0) {
      HttpLogEntry e;
      e.method = method_;
      e.path = path_;
      e.status = status_;
      e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      e.note = std::move(note_);
      logger_(e);
    }
    note_.clear();
    if (!keep_alive_ || !open_) close_gracefully();
  }

  // Closing a socket that still holds unread data makes the kernel reset the connection, and a
  // client that is still sending (a refused large body) could lose the answer it has not read.
  // So: end our side, read and drop what comes for a moment, then close.
  void close_gracefully() {
    open_ = false;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return;
    std::vector<char> scratch(64 << 10);
    stream_.expires_after(std::chrono::seconds(1));
    size_t n = 0;
    while (!run_op([&](auto h) { stream_.async_read_some(net::buffer(scratch), h); }, &n)) {
    }
    stream_.socket().close(ec);
  }

  const HttpLimits& lim_;
  const HttpHandler& handler_;
  const HttpLogger& logger_;
  net::io_context ioc_{1};
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
  bool open_ = true, keep_alive_ = true;
  int version_ = 11;
  int fd_ = -1;
  bool responded_ = false, streaming_ = false, stream_ended_ = false, chunked_ = false;
  int status_ = 0;
  std::string note_;  // HttpResponder::set_log_note
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

 public:
  void set_note(std::string n) { note_ = std::move(n); }
  std::string method_, path_;
};

HttpHeaders HttpResponder::with_always(const HttpHeaders& extra) const {
  if (always_.empty()) return extra;
  HttpHeaders all = always_;
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

bool HttpResponder::send(int status, std::string_view content_type, std::string_view body, const HttpHeaders& extra) {
  return c_.send(status, content_type, body, with_always(extra));
}
bool HttpResponder::begin_stream(int status, std::string_view content_type, const HttpHeaders& extra) {
  return c_.begin_stream(status, content_type, with_always(extra));
}
bool HttpResponder::write_stream(std::string_view data) { return c_.write_stream(data); }
bool HttpResponder::end_stream() { return c_.end_stream(); }
bool HttpResponder::peer_closed() const { return c_.peer_closed(); }
void HttpResponder::set_log_note(std::string note) { c_.set_note(std::move(note)); }

struct HttpListener::Impl {
  HttpLimits limits;
  std::atomic<bool> stopping{false};
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  HttpHandler handler;
  HttpLogger logger;
};

HttpListener::HttpListener(const std::string& host, int port, const HttpLimits& limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  M3_CHECK(limits.max_connections >= 1, "HTTP: max_connections must be >= 1");
  beast::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  const auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  M3_CHECK(!ec && !found.empty(), "cannot bind ", host, ":", port, ": ", ec ? ec.message() : "no address");
  const tcp::endpoint ep = found.begin()->endpoint();
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  M3_CHECK(!ec, "cannot bind ", host, ":", port, " (", ec.message(), ")");
}

HttpListener::~HttpListener() = default;

int HttpListener::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpListener::stop() {
  impl_->stopping.store(true);
  // Wakes the accept() that serve() is blocked in (it fails with EINVAL); closing the acceptor from
  // another thread would race with it. No connection is queued or accepted after this.
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
}

void HttpListener::serve(HttpHandler handler, HttpLogger logger) {
  impl_->handler = std::move(handler);
  impl_->logger = std::move(logger);
  // One thread per connection, at most max_connections: a handler blocks while its answer is
  // generated, and further clients wait in the listen backlog.
  // Shared: a detached connection thread may still release its slot after serve() has returned.
  auto slots = std::make_shared<std::counting_semaphore<>>(impl_->limits.max_connections);
  while (!impl_->stopping.load()) {
    if (!slots->try_acquire_for(std::chrono::milliseconds(200))) continue;  // all busy: look at stopping again
    auto conn = std::make_unique<Connection>(impl_->limits, impl_->handler, impl_->logger);
    beast::error_code ec;
    impl_->acceptor.accept(conn->socket(), ec);
    if (ec) {
      slots->release();
      if (impl_->stopping.load()) break;
      // Out of descriptors or a connection aborted before it was accepted: try again shortly.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::thread([c = std::move(conn), slots]() mutable {
      c->serve();
      c.reset();
      slots->release();
    }).detach();
  }
}

}  // namespace m3::server
