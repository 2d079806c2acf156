#include "server/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace m3::server {

namespace {

// The address and port of a socket endpoint, printed like httplib does (inet_ntop, no brackets).
bool endpoint(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    if (!inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf)) return false;
    port = ntohs(a.sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    if (!inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(a.sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  std::string addr;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !endpoint(ss, addr, port)) return false;
  if (port != remote_port || addr != remote_addr) return false;
  len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !endpoint(ss, addr, port)) return false;
  return port == local_port && addr == local_addr;
}

}  // namespace

PeerSocket::PeerSocket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                       int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (matches(int(fd), local_addr, local_port, remote_addr, remote_port)) {
      fd_ = int(fd);
      break;
    }
  }
  closedir(dir);
}

bool PeerSocket::peer_closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, short(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace m3::server
