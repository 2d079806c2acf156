#pragma once
// Cross-origin requests (the Fetch standard's CORS) for `m3 serve --cors-origin`: which requests a
// browser page from another origin may make. Off by default: the chat page the server itself
// serves is same-origin and needs none of it. docs/SERVER.md, "CORS".
#include <string>
#include <vector>

namespace m3::server {

enum class CorsDecision {
  NotCors,  // no Origin header, or the server's own origin: answer as usual, no CORS headers
  Allowed,  // an allowed origin: answer with Access-Control-Allow-Origin naming it
  Refused,  // another origin: 403, so that a page elsewhere cannot make the server work for it
};

// allowed: --cors-origin values ("*": any origin). origin, host: the request's Origin and Host.
CorsDecision cors_decide(const std::vector<std::string>& allowed, const std::string& origin, const std::string& host);

}  // namespace m3::server
