#pragma once
// Small helpers for parsers that see text in arbitrary pieces.
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace m3::chat {

// Length of the longest suffix of `text` that is a proper prefix of `marker`: the bytes a
// streaming parser must hold back because the next piece may complete the marker.
inline size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  const size_t max = std::min(text.size(), marker.size() - 1);
  for (size_t len = max; len > 0; --len) {
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace m3::chat
