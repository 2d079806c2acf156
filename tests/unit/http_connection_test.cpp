// The HTTP/1.1 framing layer (server/http_connection.h) against raw loopback clients: pipelining,
// chunked bodies and their limits, bodies without a length, Content-Encoding, streamed responses,
// deadlines and disconnect detection. tests/integration/test_server_http.py does the same through
// `m3 serve`; this one also runs under ASan.
#include <gtest/gtest.h>
#include <zlib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "server/http_connection.h"
#include "zlib_compress.h"

namespace m3::server {
namespace {

std::atomic<int> g_peer_left{0};

// One listener for the whole test program (serve() never returns): an echo handler, a stream and
// a request that waits for its client to leave.
int server_port() {
  static const int port = [] {
    HttpLimits lim;
    lim.max_body_bytes = 4096;
    lim.timeout_seconds = 2;
    lim.idle_seconds = 2;
    lim.max_connections = 8;
    auto* listener = new HttpListener("127.0.0.1", 0, lim);
    std::thread([listener] {
      listener->serve(
          [](const HttpRequest& req, HttpResponder& res) {
            if (req.path == "/stream") {
              res.begin_stream(200, "text/event-stream");
              res.write_stream("data: a\n\n");
              res.write_stream("data: b\n\n");
              res.end_stream();
            } else if (req.path == "/wait") {
              for (int i = 0; i < 1000 && !res.peer_closed(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
              if (res.peer_closed()) ++g_peer_left;
              res.send(200, "text/plain", "late");
            } else {
              res.send(200, "text/plain", "[" + req.method + " " + req.path + " " + req.body + "]");
            }
          },
          [](const HttpLogEntry&) {});
    }).detach();
    return listener->port();
  }();
  return port;
}

int connect_client() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(server_port()));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{10, 0};  // hang detection only
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `raw` on a new connection and returns everything the server sends until it closes.
std::string exchange(const std::string& raw) {
  const int fd = connect_client();
  size_t off = 0;
  while (off < raw.size()) {
    const ssize_t n = send(fd, raw.data() + off, raw.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += size_t(n);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  close(fd);
  return out;
}

std::string gzip(const std::string& in) { return m3::test::zlib_compress(in, 16 + MAX_WBITS); }

const std::string kClose = "Connection: close\r\n";

TEST(HttpConnection, PipelinedRequestsAreAnsweredInOrder) {
  const std::string out = exchange("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz"
                                   "GET /c HTTP/1.1\r\nHost: x\r\n" + kClose + "\r\n");
  const size_t a = out.find("[GET /a ]"), b = out.find("[POST /b xyz]"), c = out.find("[GET /c ]");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST(HttpConnection, ChunkedBodiesAreDecodedAndFramingChecked) {
  const std::string head = "POST /e HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n";
  EXPECT_NE(exchange(head + kClose + "\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n").find("[POST /e abcde]"), std::string::npos);
  // The CRLF after a chunk's data is missing.
  EXPECT_EQ(exchange(head + "\r\n3\r\nabcX0\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(exchange(head + "\r\nq\r\nabc\r\n0\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  // Content-Length and Transfer-Encoding together.
  EXPECT_EQ(exchange("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
                .rfind("HTTP/1.1 400", 0),
            0u);
}

TEST(HttpConnection, LimitsCountDecodedBytes) {
  // 8 chunks of 1000 bytes against a 4096-byte limit: refused at the fifth, the connection closed.
  std::string raw = "POST /e HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 8; ++i) raw += "3e8\r\n" + std::string(1000, 'a') + "\r\n";
  raw += "0\r\n\r\n";
  EXPECT_EQ(exchange(raw).rfind("HTTP/1.1 413", 0), 0u);
  EXPECT_EQ(exchange("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n").rfind("HTTP/1.1 413", 0), 0u);
  // gzip: 1 MiB of zeros compresses to ~1 KiB but is refused once past 4096 decoded bytes.
  const std::string bomb = gzip(std::string(1 << 20, '\0'));
  ASSERT_LT(bomb.size(), 4096u);
  EXPECT_EQ(exchange("POST /e HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: " + std::to_string(bomb.size()) +
                     "\r\n\r\n" + bomb)
                .rfind("HTTP/1.1 413", 0),
            0u);
  const std::string small = gzip("hello gzip");
  EXPECT_NE(exchange("POST /e HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n" + kClose + "Content-Length: " +
                     std::to_string(small.size()) + "\r\n\r\n" + small)
                .find("[POST /e hello gzip]"),
            std::string::npos);
  const std::string refused = exchange("POST /e HTTP/1.1\r\nHost: x\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx");
  EXPECT_EQ(refused.rfind("HTTP/1.1 415", 0), 0u);
  EXPECT_NE(refused.find("Accept-Encoding: gzip, deflate"), std::string::npos);
  EXPECT_EQ(exchange("GET /" + std::string(10000, 'p') + " HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 414", 0), 0u);
  EXPECT_EQ(exchange("GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(70000, 'h') + "\r\n\r\n").rfind("HTTP/1.1 431", 0), 0u);
}

TEST(HttpConnection, BodiesWithoutALength) {
  // HTTP/1.1: no Content-Length and no Transfer-Encoding is an empty body; what follows is read as
  // the next request (here a valid one).
  const std::string out = exchange("POST /e HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n" + kClose + "\r\n");
  EXPECT_NE(out.find("[POST /e ]"), std::string::npos) << out;
  EXPECT_NE(out.find("[GET /next ]"), std::string::npos) << out;
  // HTTP/1.0: a body can only be delimited by Content-Length.
  EXPECT_EQ(exchange("POST /e HTTP/1.0\r\n\r\nabc").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_NE(exchange("POST /e HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc").find("[POST /e abc]"), std::string::npos);
  EXPECT_EQ(exchange("POST /e HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
}

TEST(HttpConnection, ExpectContinueIsAnsweredBeforeTheBody) {
  const int fd = connect_client();
  const std::string head = "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n" + kClose + "\r\n";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
  char buf[4096];
  const ssize_t n = recv(fd, buf, sizeof buf, 0);  // the body is not sent until the server asks
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, size_t(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(send(fd, "abc", 3, MSG_NOSIGNAL), 3);
  std::string out;
  for (ssize_t m; (m = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, size_t(m));
  close(fd);
  EXPECT_NE(out.find("[POST /e abc]"), std::string::npos) << out;
  // A body over the limit is refused instead of invited; other expectations are 417.
  const std::string big = exchange("POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 99999\r\n\r\n");
  EXPECT_EQ(big.rfind("HTTP/1.1 413", 0), 0u) << big;
  EXPECT_EQ(exchange("POST /e HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 0\r\n\r\n").rfind("HTTP/1.1 417", 0), 0u);
}

TEST(HttpConnection, StreamsAreChunkedOnHttp11AndCloseDelimitedOnHttp10) {
  const std::string s11 = exchange("GET /stream HTTP/1.1\r\nHost: x\r\n" + kClose + "\r\n");
  EXPECT_NE(s11.find("Transfer-Encoding: chunked"), std::string::npos) << s11;
  EXPECT_NE(s11.find("9\r\ndata: a\n\n\r\n9\r\ndata: b\n\n\r\n0\r\n\r\n"), std::string::npos) << s11;
  const std::string s10 = exchange("GET /stream HTTP/1.0\r\n\r\n");
  EXPECT_EQ(s10.find("chunked"), std::string::npos) << s10;
  EXPECT_NE(s10.find("\r\n\r\ndata: a\n\ndata: b\n\n"), std::string::npos) << s10;
}

TEST(HttpConnection, AStalledRequestIsCutOffByItsDeadline) {
  const int fd = connect_client();
  const std::string part = "GET / HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(send(fd, part.data(), part.size(), MSG_NOSIGNAL), ssize_t(part.size()));
  // One header byte every 300 ms: each read is quick, the request never completes; the 2 s
  // deadline must close the connection (hang detection: 10 s).
  bool closed = false;
  for (int i = 0; i < 33 && !closed; ++i) {
    if (send(fd, "a", 1, MSG_NOSIGNAL) != 1) closed = true;
    pollfd p{fd, short(POLLIN | POLLRDHUP), 300};
    if (poll(&p, 1, 300) > 0) {
      char c;
      if (recv(fd, &c, 1, MSG_DONTWAIT) <= 0) closed = true;
    }
  }
  close(fd);
  EXPECT_TRUE(closed);
}

TEST(HttpConnection, AHandlerSeesItsClientLeave) {
  const int before = g_peer_left;
  const int fd = connect_client();
  const std::string raw = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, raw.data(), raw.size(), MSG_NOSIGNAL), ssize_t(raw.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  close(fd);
  for (int i = 0; i < 500 && g_peer_left == before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(g_peer_left, before + 1);
}

TEST(HttpConnection, PeerClosedIsNotMoreData) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EXPECT_FALSE(socket_peer_closed(sv[0]));
  ASSERT_EQ(write(sv[1], "GET / HTTP/1.1\r\n\r\n", 18), 18);  // a pipelined request: still there
  EXPECT_FALSE(socket_peer_closed(sv[0]));
  close(sv[1]);
  EXPECT_TRUE(socket_peer_closed(sv[0]));
  close(sv[0]);
  EXPECT_FALSE(socket_peer_closed(-1));  // unknown socket: never "closed"
}

}  // namespace
}  // namespace m3::server
