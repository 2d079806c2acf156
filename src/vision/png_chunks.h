#pragma once
// A walk over a PNG's chunks before any decoder sees it: every chunk's CRC is verified (stb_image
// does not; Pillow, the reference for preprocessing, refuses a wrong CRC), and the IDAT bytes are
// counted so that the header's width x height can be checked against what they can inflate to.
#include <cstddef>
#include <cstdint>
#include <string>

namespace m3::vision {

// CRC-32 (ISO-HDLC, as PNG and zlib use it) of `n` bytes, continuing from `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t n);

struct PngChunkSummary {
  uint64_t idat_bytes = 0;  // total length of the IDAT chunks' data
};

// Checks the chunk sequence after the 8-byte signature up to IEND; throws m3::Error naming `name`
// on a wrong CRC, a chunk length over 2^31 - 1 or a chunk that runs past the end of the file.
PngChunkSummary check_png_chunks(const uint8_t* d, size_t n, const std::string& name);

}  // namespace m3::vision
