#include "m3/chat/utf8_stream.h"

#include <cstdint>

namespace m3::chat {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Sequence length for a lead byte (0 = never valid) and the allowed range of the second byte,
// which is where overlongs, surrogates and values above U+10FFFF are excluded.
struct Lead {
  int length;
  uint8_t lo, hi;
};

Lead lead_of(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  out.reserve(pending_.size());
  size_t i = 0;
  const size_t n = pending_.size();
  while (i < n) {
    const uint8_t c = static_cast<uint8_t>(pending_[i]);
    const Lead lead = lead_of(c);
    if (lead.length == 1) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (lead.length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    int k = 1;
    bool bad = false;
    for (; k < lead.length; ++k) {
      if (i + k >= n) break;  // incomplete so far
      const uint8_t b = static_cast<uint8_t>(pending_[i + k]);
      const uint8_t lo = k == 1 ? lead.lo : 0x80, hi = k == 1 ? lead.hi : 0xBF;
      if (b < lo || b > hi) {
        bad = true;
        break;
      }
    }
    if (bad) {
      out += kReplacement;  // the valid prefix seen so far is one ill-formed subpart
      i += k;
    } else if (k < lead.length) {
      break;  // wait for the rest of the character
    } else {
      out.append(pending_, i, lead.length);
      i += lead.length;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace m3::chat
