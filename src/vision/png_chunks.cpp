#include "vision/png_chunks.h"

#include <array>
#include <string_view>

#include "m3/error.h"

namespace m3::vision {
namespace {

// The byte-at-a-time table of the reflected polynomial 0xEDB88320.
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

}  // namespace

uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

PngChunkSummary check_png_chunks(const uint8_t* d, size_t n, const std::string& name) {
  PngChunkSummary s;
  size_t p = 8;  // after the signature
  while (p < n) {
    M3_CHECK(n - p >= 12, name, ": corrupt PNG (truncated: the chunk header at byte ", p, " is cut off)");
    const uint32_t len = be32(d + p);
    M3_CHECK(len <= 0x7FFFFFFFu, name, ": corrupt PNG (chunk length ", len, " at byte ", p, " is over 2^31 - 1)");
    M3_CHECK(n - p - 12 >= len, name, ": corrupt PNG (truncated: a chunk of ", len, " bytes at byte ", p,
             " runs past the end of the file)");
    const uint8_t* type = d + p + 4;
    const uint32_t stored = be32(type + 4 + len);
    const uint32_t computed = crc32_update(0, type, 4 + size_t(len));
    std::string shown(reinterpret_cast<const char*>(type), 4);  // for the message: letters only
    for (char& c : shown)
      if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) c = '?';
    M3_CHECK(stored == computed, name, ": corrupt PNG (wrong CRC in the ", shown, " chunk at byte ", p, ")");
    if (std::string_view(reinterpret_cast<const char*>(type), 4) == "IDAT") s.idat_bytes += len;
    if (std::string_view(reinterpret_cast<const char*>(type), 4) == "IEND") break;
    p += 12 + size_t(len);
  }
  return s;
}

}  // namespace m3::vision
