#pragma once
// The chat page's static files (src/server/web), compiled into the binary by cmake/embed_web.cmake.
#include <cstddef>
#include <string_view>

namespace m3::server {

struct WebAsset {
  const char* path;          // "/index.html", "/app.js", ...
  const char* content_type;  // with charset
  const unsigned char* data;
  size_t size;
};

// The file served at `path` ("/" is /index.html), or nullptr.
const WebAsset* find_web_asset(std::string_view path);

}  // namespace m3::server
