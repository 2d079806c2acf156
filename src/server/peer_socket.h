#pragma once
// Notices a client that has gone away while its request is still being generated.
//
// cpp-httplib 0.11 (Debian 12) tells a handler nothing about its connection but the endpoints, and
// a streaming response only learns of a closed peer when a write fails. So the handler finds its own
// socket by those endpoints (unique while the handler runs: the connection is open and owned by this
// thread) and polls it for the peer's FIN or RST.
#include <string>

namespace m3::server {

class PeerSocket {
 public:
  // The connected TCP socket of this process with these local and remote endpoints (IPv4 or IPv6,
  // as httplib prints them); invalid when none matches.
  PeerSocket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  explicit PeerSocket(int fd) : fd_(fd) {}

  bool valid() const { return fd_ >= 0; }
  // True once the peer has closed or reset the connection. A client that only sent more data
  // (a pipelined request) is still there. Never blocks; false when the socket is unknown.
  bool peer_closed() const;

 private:
  int fd_ = -1;
};

}  // namespace m3::server
