#include "tokenizer/byte_level.h"

#include <array>
#include <unordered_map>

namespace m3::tok {
namespace {

struct ByteTables {
  std::array<std::string, 256> byte_to_text;        // byte -> UTF-8 of its stand-in code point
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;  // stand-in code point -> byte
};

// Printable bytes keep their own code point; the 68 others ('\0'..' ', DEL..NBSP, soft hyphen)
// are numbered from U+0100 in byte order. This is the table every byte-level BPE vocabulary
// (GPT-2, o200k conversions, MiniMax) is written with.
bool maps_to_itself(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

const ByteTables& tables() {
  static const ByteTables t = [] {
    ByteTables built;
    uint32_t next_shifted = 256;
    for (int b = 0; b < 256; ++b) {
      uint32_t cp = maps_to_itself(b) ? static_cast<uint32_t>(b) : next_shifted++;
      append_utf8(built.byte_to_text[b], cp);
      built.cp_to_byte[cp] = static_cast<uint8_t>(b);
    }
    return built;
  }();
  return t;
}

bool in_range(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

}  // namespace

const std::string& byte_to_unicode(uint8_t byte) { return tables().byte_to_text[byte]; }

std::string bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += byte_to_unicode(b);
  return out;
}

std::optional<std::string> unicode_to_bytes(std::string_view mapped) {
  const auto& cp_to_byte = tables().cp_to_byte;
  std::string out;
  out.reserve(mapped.size());
  for (size_t pos = 0; pos < mapped.size();) {
    Utf8Scan s = scan_utf8(mapped, pos);
    if (s.kind != Utf8Kind::kComplete) return std::nullopt;
    auto it = cp_to_byte.find(decode_utf8(mapped, pos, s.length));
    if (it == cp_to_byte.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
    pos += s.length;
  }
  return out;
}

Utf8Scan scan_utf8(std::string_view text, size_t pos) {
  const auto byte_at = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  const uint8_t lead = byte_at(0);
  if (lead < 0x80) return {Utf8Kind::kComplete, 1};

  // Allowed range of the second byte depends on the lead byte (this excludes overlong forms,
  // UTF-16 surrogates and code points past U+10FFFF); later bytes are plain continuations.
  size_t length = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (in_range(lead, 0xC2, 0xDF)) {
    length = 2;
  } else if (in_range(lead, 0xE0, 0xEF)) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (in_range(lead, 0xF0, 0xF4)) {
    length = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Kind::kInvalid, 1};  // stray continuation byte, C0/C1, or F5..FF
  }
  for (size_t i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return {Utf8Kind::kIncomplete, i};
    const uint8_t b = byte_at(i);
    const bool ok = (i == 1) ? in_range(b, lo, hi) : in_range(b, 0x80, 0xBF);
    if (!ok) return {Utf8Kind::kInvalid, i};
  }
  return {Utf8Kind::kComplete, length};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t decode_utf8(std::string_view text, size_t pos, size_t length) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[pos + i])); };
  switch (length) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace m3::tok
