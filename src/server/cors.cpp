#include "server/cors.h"

#include <algorithm>

namespace m3::server {

CorsDecision cors_decide(const std::vector<std::string>& allowed, const std::string& origin, const std::string& host) {
  if (origin.empty()) return CorsDecision::NotCors;
  // The page's own origin: http://HOST[:PORT] as the Host header names the server.
  const std::string scheme = "http://";
  if (!host.empty() && origin.size() > scheme.size() && origin.compare(0, scheme.size(), scheme) == 0 &&
      origin.substr(scheme.size()) == host)
    return CorsDecision::NotCors;
  const bool listed = std::find(allowed.begin(), allowed.end(), origin) != allowed.end() ||
                      std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  return listed ? CorsDecision::Allowed : CorsDecision::Refused;
}

}  // namespace m3::server
