// PeerSocket: finds this process's socket of a connection by its endpoints and sees the peer leave.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/peer_socket.h"

namespace m3::server {
namespace {

// A loopback TCP connection: the accepted (server) side and the client side.
struct Connection {
  int listener = -1, server = -1, client = -1;
  int server_port = 0, client_port = 0;
  Connection() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    socklen_t len = sizeof a;
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    server_port = ntohs(a.sin_port);
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    server = accept(listener, nullptr, nullptr);
    sockaddr_in c{};
    len = sizeof c;
    getsockname(client, reinterpret_cast<sockaddr*>(&c), &len);
    client_port = ntohs(c.sin_port);
  }
  ~Connection() {
    for (int fd : {listener, server, client})
      if (fd >= 0) close(fd);
  }
};

TEST(PeerSocket, FindsTheConnectionByItsEndpoints) {
  Connection c;
  ASSERT_GE(c.server, 0);
  // As httplib describes the request: the server's local endpoint and the client's.
  const PeerSocket found("127.0.0.1", c.server_port, "127.0.0.1", c.client_port);
  EXPECT_TRUE(found.valid());
  EXPECT_FALSE(found.peer_closed());
  // The same endpoints seen from the client's side are another socket; a wrong port is none.
  EXPECT_FALSE(PeerSocket("127.0.0.1", c.server_port, "127.0.0.1", c.client_port + 1).valid());
  EXPECT_FALSE(PeerSocket("127.0.0.2", c.server_port, "127.0.0.1", c.client_port).valid());
}

TEST(PeerSocket, SeesThePeerCloseButNotMoreData) {
  Connection c;
  const PeerSocket peer(c.server);
  EXPECT_FALSE(peer.peer_closed());
  ASSERT_EQ(write(c.client, "GET / HTTP/1.1\r\n\r\n", 18), 18);  // a pipelined request: still there
  EXPECT_FALSE(peer.peer_closed());
  close(c.client);
  c.client = -1;
  EXPECT_TRUE(peer.peer_closed());
  EXPECT_FALSE(PeerSocket(-1).peer_closed());  // unknown socket: never "closed"
}

}  // namespace
}  // namespace m3::server
