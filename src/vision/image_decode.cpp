#include "vision/image_decode.h"

#include <algorithm>
#include <cstdlib>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "base/read_file.h"
#include "m3/error.h"
#include "vision/png_chunks.h"

// stb_image is compiled here, private to this file (STB_IMAGE_STATIC), so the build needs no
// libstb link and cannot clash with another copy. Only the formats we accept are compiled in.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_NO_STDIO
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#ifdef M3_HAVE_LIBJPEG
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
#include <jerror.h>  // JWRN_JPEG_EOF
#endif

namespace m3::vision {
namespace {

enum class Format { png, jpeg, bmp, gif, unknown };

Format sniff(const uint8_t* d, size_t n) {
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return Format::png;
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return Format::jpeg;
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0)) return Format::gif;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return Format::bmp;
  return Format::unknown;
}

const char* format_name(Format f) {
  switch (f) {
    case Format::png: return "PNG";
    case Format::jpeg: return "JPEG";
    case Format::bmp: return "BMP";
    case Format::gif: return "GIF";
    default: return "unknown";
  }
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// Pillow's paste(image, mask=alpha) onto a plain background: per channel
// (v*a + bg*(255-a)) / 255 with its rounding (checked against Pillow for all 256x256 (v, a)).
uint8_t blend(int v, int a, int bg) {
  const int t = v * a + bg * (255 - a) + 128;
  return uint8_t(((t >> 8) + t) >> 8);
}

// Any 1..4 channel 8-bit buffer -> RGB. Gray is replicated (Pillow's L->RGB); an alpha channel is
// composited onto the background, as vLLM's convert_image_mode does for images with transparency.
RgbImage to_rgb(const uint8_t* src, int w, int h, int channels, const uint8_t bg[3]) {
  RgbImage out(w, h);
  const size_t n = size_t(w) * size_t(h);
  uint8_t* o = out.pixels.data();
  for (size_t i = 0; i < n; ++i, o += 3) {
    const uint8_t* s = src + i * size_t(channels);
    switch (channels) {
      case 1: o[0] = o[1] = o[2] = s[0]; break;
      case 2: o[0] = blend(s[0], s[1], bg[0]), o[1] = blend(s[0], s[1], bg[1]), o[2] = blend(s[0], s[1], bg[2]); break;
      case 3: o[0] = s[0], o[1] = s[1], o[2] = s[2]; break;
      default: o[0] = blend(s[0], s[3], bg[0]), o[1] = blend(s[1], s[3], bg[1]), o[2] = blend(s[2], s[3], bg[2]); break;
    }
  }
  return out;
}

struct StbFree {
  void operator()(void* p) const { stbi_image_free(p); }
};

// --- EXIF orientation -------------------------------------------------------------------------

// Reads tag 0x0112 from IFD0 of a TIFF block (the payload of JPEG APP1 "Exif\0\0" or PNG eXIf).
// Returns 1 (no change) when absent or malformed: a broken EXIF never fails the image, as in vLLM.
int tiff_orientation(const uint8_t* t, size_t n) {
  if (n < 8) return 1;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](size_t off) { return le ? uint32_t(t[off] | t[off + 1] << 8) : uint32_t(t[off] << 8 | t[off + 1]); };
  auto u32 = [&](size_t off) { return le ? (u16(off) | u16(off + 2) << 16) : (u16(off) << 16 | u16(off + 2)); };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd + 2 > n) return 1;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count && ifd + 2 + 12 * (i + 1) <= n; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (u16(e) != 0x0112) continue;
    const uint32_t type = u16(e + 2);
    if (type == 3) return int(u16(e + 8));   // SHORT
    if (type == 4) return int(u32(e + 8));   // LONG
    return 1;
  }
  return 1;
}

int jpeg_orientation(const uint8_t* d, size_t n) {
  size_t p = 2;  // after SOI
  while (p + 4 <= n && d[p] == 0xFF) {
    const uint8_t marker = d[p + 1];
    if (marker == 0xFF) { ++p; continue; }  // fill byte
    if (marker == 0xDA || marker == 0xD9) break;  // image data starts: no more metadata
    const size_t len = size_t(d[p + 2]) << 8 | d[p + 3];
    if (len < 2 || p + 2 + len > n) break;
    const uint8_t* body = d + p + 4;
    if (marker == 0xE1 && len >= 8 && std::memcmp(body, "Exif\0\0", 6) == 0)
      return tiff_orientation(body + 6, len - 8);  // Pillow keeps the first Exif APP1
    p += 2 + len;
  }
  return 1;
}

int png_orientation(const uint8_t* d, size_t n) {
  size_t p = 8;
  while (p + 12 <= n) {
    const size_t len = be32(d + p);
    if (len > n - p - 12) break;
    if (std::memcmp(d + p + 4, "eXIf", 4) == 0) {
      const uint8_t* body = d + p + 8;
      // Some writers keep the JPEG-style "Exif\0\0" prefix; Pillow accepts both.
      if (len >= 6 && std::memcmp(body, "Exif\0\0", 6) == 0) return tiff_orientation(body + 6, len - 6);
      return tiff_orientation(body, len);
    }
    if (std::memcmp(d + p + 4, "IEND", 4) == 0) break;
    p += 12 + len;
  }
  return 1;
}

// --- PNG: the colour type decides what Pillow (and so vLLM) does with transparency -------------

struct PngHeader {
  int bit_depth = 0;
  int color_type = -1;  // 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
};

PngHeader png_header(const uint8_t* d, size_t n) {
  PngHeader h;
  if (n >= 33 && std::memcmp(d + 12, "IHDR", 4) == 0) {
    h.bit_depth = d[24];
    h.color_type = d[25];
  }
  return h;
}

RgbImage decode_png(const uint8_t* d, size_t n, const std::string& name, const DecodeOptions& opt) {
  const PngHeader hdr = png_header(d, n);
  int w = 0, h = 0, ch = 0;
  const int len = int(n);
  if (hdr.color_type == 0 && hdr.bit_depth == 16) {
    // Pillow opens 16-bit gray as mode "I" and its I->RGB conversion clips at 255 instead of
    // scaling, so 256..65535 all become white. The reference sees that, so we do too.
    std::unique_ptr<uint16_t, StbFree> px(stbi_load_16_from_memory(d, len, &w, &h, &ch, 0));
    M3_CHECK(px, name, ": corrupt PNG (", stbi_failure_reason(), ")");
    std::vector<uint8_t> gray(size_t(w) * size_t(h) * size_t(ch));
    for (size_t i = 0; i < gray.size(); ++i) {
      const bool alpha = ch == 2 && i % 2 == 1;  // a tRNS key becomes an alpha channel in stb
      gray[i] = alpha ? uint8_t(px.get()[i] >> 8) : uint8_t(std::min<uint16_t>(px.get()[i], 255));
    }
    return to_rgb(gray.data(), w, h, ch, opt.background);
  }
  // RGB with a tRNS colour key stays mode "RGB" in Pillow and vLLM returns it unchanged: the key
  // colour is NOT composited. stb would turn the key into alpha, so ask for 3 channels.
  const int want = hdr.color_type == 2 ? 3 : 0;
  std::unique_ptr<uint8_t, StbFree> px(stbi_load_from_memory(d, len, &w, &h, &ch, want));
  M3_CHECK(px, name, ": corrupt PNG (", stbi_failure_reason(), ")");
  return to_rgb(px.get(), w, h, want ? want : ch, opt.background);
}

// --- JPEG ---------------------------------------------------------------------------------------

#ifdef M3_HAVE_LIBJPEG
// Pillow's CMYK->RGB (Convert.c cmyk2rgb): r = 255 - k - c*(255-k)/255, rounded like MULDIV255.
void cmyk_to_rgb(const uint8_t* s, uint8_t* o, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, s += 4, o += 3) {
    const int nk = 255 - s[3];
    for (int c = 0; c < 3; ++c) {
      const int t = s[c] * nk + 128;
      o[c] = uint8_t(std::max(0, nk - (((t >> 8) + t) >> 8)));
    }
  }
}

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
};

void jpeg_on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  c->err->format_message(c, e->message);
  std::longjmp(e->jump, 1);
}

// libjpeg treats running out of data as a warning and pads with gray; Pillow refuses the image
// ("image file is truncated"), so we do too. Other warnings (extraneous bytes) are ignored, as in Pillow.
void jpeg_on_message(j_common_ptr c, int level) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
    e->truncated = true;
    std::snprintf(e->message, sizeof e->message, "data ends early");
    std::longjmp(e->jump, 1);
  }
}

// Decodes with libjpeg's defaults (ISLOW IDCT, fancy upsampling), exactly as Pillow does.
// Returns false with e.message set on failure. No C++ object with a destructor is created between
// setjmp and the calls that may longjmp, except `out`, which lives in the caller.
bool jpeg_decode_libjpeg(const uint8_t* d, size_t n, int64_t max_pixels, std::vector<uint8_t>* out, int* w,
                         int* h, int* channels, JpegError* e, bool* too_large) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&e->mgr);
  e->mgr.error_exit = jpeg_on_error;
  e->mgr.emit_message = jpeg_on_message;
  if (setjmp(e->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, d, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  if (int64_t(cinfo.image_width) * int64_t(cinfo.image_height) > max_pixels) {
    *w = int(cinfo.image_width), *h = int(cinfo.image_height);
    *too_large = true;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // gray is replicated to RGB by libjpeg
  jpeg_start_decompress(&cinfo);
  *w = int(cinfo.output_width), *h = int(cinfo.output_height), *channels = cinfo.output_components;
  const size_t stride = size_t(*w) * size_t(*channels);
  out->resize(stride * size_t(*h));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW rows[1] = {out->data() + size_t(cinfo.output_scanline) * stride};
    jpeg_read_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}
#endif

#ifndef M3_HAVE_LIBJPEG
// What stb_image needs checked before it sees a JPEG. Walks every marker segment, entropy-coded
// data included (DHT may sit between progressive scans; an EXIF thumbnail's EOI is skipped with
// its APP1 segment).
struct JpegScan {
  bool huffman_ok = true;  // every Huffman table declares at most 256 codes
  bool has_eoi = false;    // the end-of-image marker is reached
};

JpegScan scan_jpeg(const uint8_t* d, size_t n) {
  JpegScan s;
  size_t p = 2;
  while (p + 2 <= n) {
    if (d[p] != 0xFF) {  // entropy-coded data: skip to the next real marker
      ++p;
      continue;
    }
    const uint8_t m = d[p + 1];
    if (m == 0xFF || m == 0x00 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) {  // fill, stuffing, RSTn, TEM
      p += m == 0xFF ? 1 : 2;
      continue;
    }
    if (m == 0xD9) {
      s.has_eoi = true;
      break;
    }
    if (p + 4 > n) break;
    const size_t len = size_t(d[p + 2]) << 8 | d[p + 3];
    if (len < 2) break;  // stb reports the broken segment itself
    if (m == 0xC4) {
      size_t q = p + 4;
      const size_t end = std::min(n, p + 2 + len);
      while (q + 17 <= end) {
        size_t codes = 0;
        for (int i = 1; i <= 16; ++i) codes += d[q + size_t(i)];
        if (codes > 256) s.huffman_ok = false;
        q += 17 + codes;
      }
    }
    p += 2 + len;
  }
  return s;
}
#endif

RgbImage decode_jpeg(const uint8_t* d, size_t n, const std::string& name, const DecodeOptions& opt) {
#ifdef M3_HAVE_LIBJPEG
  std::vector<uint8_t> px;
  int w = 0, h = 0, ch = 0;
  bool too_large = false;
  auto e = std::make_unique<JpegError>();
  if (!jpeg_decode_libjpeg(d, n, opt.max_pixels, &px, &w, &h, &ch, e.get(), &too_large)) {
    M3_CHECK(!too_large, name, ": image is ", w, "x", h, " pixels, more than the limit of ", opt.max_pixels);
    fail(name, e->truncated ? ": truncated JPEG" : ": corrupt JPEG", " (", e->message, ")");
  }
  M3_CHECK(w > 0 && h > 0, name, ": zero-size JPEG");
  if (ch == 4) {
    // Pillow reads CMYK JPEGs as "CMYK;I" (Adobe's inverted convention) before converting.
    for (uint8_t& v : px) v = uint8_t(255 - v);
    RgbImage out(w, h);
    cmyk_to_rgb(px.data(), out.pixels.data(), size_t(w) * size_t(h));
    return out;
  }
  return to_rgb(px.data(), w, h, ch, opt.background);
#else
  // stb_image 2.27 (Debian 12) writes past its Huffman tables when a DHT segment declares more
  // than 256 codes, and decodes a cut file as if the rest were zeros (Pillow refuses it).
  const JpegScan scan = scan_jpeg(d, n);
  M3_CHECK(scan.huffman_ok, name, ": corrupt JPEG (Huffman table with more than 256 codes)");
  M3_CHECK(scan.has_eoi, name, ": truncated JPEG (no end-of-image marker)");
  int w = 0, h = 0, ch = 0;
  std::unique_ptr<uint8_t, StbFree> px(stbi_load_from_memory(d, int(n), &w, &h, &ch, 3));
  M3_CHECK(px, name, ": corrupt JPEG (", stbi_failure_reason(), ")");
  return to_rgb(px.get(), w, h, 3, opt.background);
#endif
}

// --- header dimensions (for the zero-size and pixel-count guards, before decoding) ---------------

struct Dims {
  bool known = false;
  int64_t width = 0, height = 0;
};

uint32_t le16(const uint8_t* p) { return uint32_t(p[0] | p[1] << 8); }
int32_t le32(const uint8_t* p) { return int32_t(le16(p) | le16(p + 2) << 16); }

Dims jpeg_dims(const uint8_t* d, size_t n) {
  size_t p = 2;
  while (p + 4 <= n && d[p] == 0xFF) {
    const uint8_t m = d[p + 1];
    if (m == 0xFF) { ++p; continue; }
    if (m == 0xDA || m == 0xD9) break;
    const size_t len = size_t(d[p + 2]) << 8 | d[p + 3];
    if (len < 2 || p + 2 + len > n) break;
    // SOF0..SOF15 except DHT (C4), JPG (C8), DAC (CC): precision, height, width.
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && len >= 7)
      return {true, int64_t(d[p + 7]) << 8 | d[p + 8], int64_t(d[p + 5]) << 8 | d[p + 6]};
    p += 2 + len;
  }
  return {};
}

Dims header_dims(const uint8_t* d, size_t n, Format f) {
  switch (f) {
    case Format::png:
      if (n >= 24 && std::memcmp(d + 12, "IHDR", 4) == 0) return {true, be32(d + 16), be32(d + 20)};
      return {};
    case Format::gif:  // logical screen size, which is the size Pillow and stb give the frame
      if (n >= 10) return {true, le16(d + 6), le16(d + 8)};
      return {};
    case Format::bmp:
      if (n >= 26 && le32(d + 14) == 12) return {true, le16(d + 18), le16(d + 20)};  // OS/2 core header
      if (n >= 26) return {true, std::abs(int64_t(le32(d + 18))), std::abs(int64_t(le32(d + 22)))};
      return {};
    case Format::jpeg:
      return jpeg_dims(d, n);
    default:
      return {};
  }
}

// --- how many pixels the file's bytes can really hold ---------------------------------------------

// A header can claim any size; decoding then allocates and fills width x height pixels from data
// that is not there (a 342-byte BMP claiming 9000 x 9000 took 17 s). Each format's coding has a
// hard limit on how many pixels one byte can produce; a header that claims more than the file
// can back is refused before decoding. The limits are proofs, not guesses, so no valid image is
// refused. Returns -1 when this format (or coding) has no such limit.
int64_t pixels_backed_by(const uint8_t* d, size_t n, Format f, uint64_t png_idat_bytes) {
  switch (f) {
    case Format::png:
      // Deflate expands at most 1032-fold; each row is one filter byte plus at least 1 bit per
      // pixel, so the IDAT bytes hold at most 8 * 1032 pixels each.
      return int64_t(std::min<uint64_t>(png_idat_bytes, uint64_t(INT32_MAX)) * 8 * 1032);
    case Format::jpeg: {
      // Huffman coding spends at least one bit on every 8 x 8 block's DC coefficient of the
      // full-resolution component: at most 512 pixels per byte. Arithmetic coding (SOF9..SOF15,
      // rare) has no such floor: no limit then.
      size_t p = 2;
      while (p + 4 <= n && d[p] == 0xFF) {
        const uint8_t m = d[p + 1];
        if (m == 0xFF) { ++p; continue; }
        if (m == 0xDA || m == 0xD9) break;
        if (m >= 0xC9 && m <= 0xCF && m != 0xCC) return -1;
        if (m >= 0xC0 && m <= 0xC7 && m != 0xC4) return int64_t(n) * 512;
        p += 2 + (size_t(d[p + 2]) << 8 | d[p + 3]);
      }
      return -1;
    }
    case Format::gif:
      // LZW codes are at least 3 bits and one code emits at most 4096 pixels.
      return int64_t(n) * 8 / 3 * 4096;
    case Format::bmp: {
      // Uncompressed (BI_RGB, BI_BITFIELDS, BI_ALPHABITFIELDS) rows are ((bpp * width + 31) / 32) * 4
      // bytes: the header's size must fit in the file after the pixel-data offset. RLE is not
      // decoded at all (stb_image refuses it).
      if (n < 26) return -1;
      const bool os2 = le32(d + 14) == 12;  // OS/2 core header: 16-bit sizes, never compressed
      if (!os2 && n < 34) return -1;
      const uint32_t compression = os2 ? 0 : uint32_t(le32(d + 30));
      if (compression != 0 && compression != 3 && compression != 6) return -1;
      const uint64_t bpp = os2 ? le16(d + 24) : le16(d + 28);
      if (bpp == 0) return -1;
      const uint64_t offset = uint32_t(le32(d + 10));
      const uint64_t data = n > offset ? n - offset : 0;
      const uint64_t width = os2 ? le16(d + 18) : uint64_t(std::abs(int64_t(le32(d + 18))));
      const uint64_t row = (bpp * width + 31) / 32 * 4;
      if (row == 0) return -1;
      return int64_t(std::min<uint64_t>(data / row, uint64_t(INT32_MAX)) * width);  // whole rows present
    }
    default:
      return -1;
  }
}

// --- GIF: what lies outside the first frame -----------------------------------------------------

// The first frame may cover only part of the logical screen. Pillow fills the rest with the
// transparency index if there is one (composited to the background by vLLM), else with index 0
// of the frame's palette; stb fills it with the background colour. We record what Pillow does.
struct GifFirstFrame {
  bool found = false;
  int left = 0, top = 0, width = 0, height = 0;
  bool transparent = false;
  uint8_t fill[3] = {0, 0, 0};  // palette entry 0
};

GifFirstFrame gif_first_frame(const uint8_t* d, size_t n) {
  GifFirstFrame g;
  if (n < 13) return g;
  size_t p = 13;
  const uint8_t* palette = nullptr;
  if (d[10] & 0x80) {
    palette = d + 13;
    p += 3 * (size_t(2) << (d[10] & 7));
  }
  auto skip_sub_blocks = [&](size_t q) {
    while (q < n && d[q] != 0) q += size_t(d[q]) + 1;
    return q + 1;
  };
  while (p < n) {
    if (d[p] == 0x21 && p + 1 < n) {  // extension
      if (d[p + 1] == 0xF9 && p + 4 < n) g.transparent = (d[p + 3] & 1) != 0;  // graphic control
      p = skip_sub_blocks(p + 2);
    } else if (d[p] == 0x2C && p + 10 <= n) {  // image descriptor
      g.left = int(le16(d + p + 1)), g.top = int(le16(d + p + 3));
      g.width = int(le16(d + p + 5)), g.height = int(le16(d + p + 7));
      if (d[p + 9] & 0x80) palette = d + p + 10;  // local colour table
      if (palette && palette + 3 <= d + n) std::memcpy(g.fill, palette, 3);
      g.found = true;
      return g;
    } else {
      break;
    }
  }
  return g;
}

RgbImage decode_gif(const uint8_t* d, size_t n, const std::string& name, const DecodeOptions& opt) {
  int w = 0, h = 0, ch = 0;
  std::unique_ptr<uint8_t, StbFree> px(stbi_load_from_memory(d, int(n), &w, &h, &ch, 4));
  M3_CHECK(px, name, ": corrupt GIF (", stbi_failure_reason(), ")");
  const GifFirstFrame g = gif_first_frame(d, n);
  if (g.found) {
    uint8_t* p = px.get();
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x, p += 4) {
        if (x >= g.left && x < g.left + g.width && y >= g.top && y < g.top + g.height) continue;
        if (g.transparent) p[3] = 0;
        else p[0] = g.fill[0], p[1] = g.fill[1], p[2] = g.fill[2], p[3] = 255;
      }
  }
  // Transparent pixels (alpha 0 from stb) are composited, as vLLM does for a palette image
  // with a transparency index.
  return to_rgb(px.get(), w, h, 4, opt.background);
}

// --- the rest -----------------------------------------------------------------------------------

RgbImage decode_bmp(const uint8_t* d, size_t n, const std::string& name) {
  // Pillow reads 32-bit BI_RGB as "BGRX" (alpha ignored), so drop alpha rather than composite.
  int w = 0, h = 0, ch = 0;
  std::unique_ptr<uint8_t, StbFree> px(stbi_load_from_memory(d, int(n), &w, &h, &ch, 3));
  M3_CHECK(px, name, ": corrupt BMP (", stbi_failure_reason(), ")");
  RgbImage out(w, h);
  std::memcpy(out.pixels.data(), px.get(), out.pixels.size());
  return out;
}

}  // namespace

const char* jpeg_decoder_name() {
#ifdef M3_HAVE_LIBJPEG
  return "libjpeg-turbo";
#else
  return "stb_image";
#endif
}

RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& opt) {
  M3_CHECK(size > 0, name, ": empty file, not an image");
  M3_CHECK(size <= size_t(INT32_MAX), name, ": file too large to be an image (", size, " bytes)");
  const Format f = sniff(data, size);
  M3_CHECK(f != Format::unknown, name, ": unsupported image format (expected PNG, JPEG, BMP or GIF)");

  // The size guard runs on the header alone, before any pixel memory is allocated.
  const Dims dims = header_dims(data, size, f);
  M3_CHECK(dims.known, name, ": corrupt ", format_name(f), " (no readable image header)");
  M3_CHECK(dims.width > 0 && dims.height > 0, name, ": zero-size ", format_name(f), " image (", dims.width, "x",
           dims.height, ")");
  // Header values go up to 2^32 - 1 each: compare without forming a product that could overflow.
  M3_CHECK(dims.width <= opt.max_pixels && dims.height <= opt.max_pixels / dims.width, name, ": image is ", dims.width,
           "x", dims.height, " pixels, more than the limit of ", opt.max_pixels);
  const uint64_t idat_bytes = f == Format::png ? check_png_chunks(data, size, name).idat_bytes : 0;
  const int64_t backed = pixels_backed_by(data, size, f, idat_bytes);
  M3_CHECK(backed < 0 || dims.width * dims.height <= backed, name, ": corrupt ", format_name(f), " (the header claims ",
           dims.width, "x", dims.height, " pixels but the file's ", size, " bytes can hold at most ", backed, ")");

  RgbImage image;
  int orientation = 1;
  switch (f) {
    case Format::png:
      image = decode_png(data, size, name, opt);
      orientation = png_orientation(data, size);
      break;
    case Format::jpeg:
      image = decode_jpeg(data, size, name, opt);
      orientation = jpeg_orientation(data, size);
      break;
    case Format::gif:
      image = decode_gif(data, size, name, opt);
      break;
    default:
      image = decode_bmp(data, size, name);
      break;
  }
  if (opt.apply_exif_orientation && orientation >= 2 && orientation <= 8) image = apply_orientation(image, orientation);
  return image;
}

RgbImage decode_image_file(const std::string& path, const DecodeOptions& options) {
  const std::string bytes = read_whole_file(path, "an image file");
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, options);
}

RgbImage apply_orientation(const RgbImage& in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int W = in.width, H = in.height;
  const bool swap = orientation >= 5;  // 5..8 exchange width and height
  RgbImage out(swap ? H : W, swap ? W : H);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // source pixel, per Pillow's Image.transpose methods
      switch (orientation) {
        case 2: sx = W - 1 - x; break;                    // FLIP_LEFT_RIGHT
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;    // ROTATE_180
        case 4: sy = H - 1 - y; break;                    // FLIP_TOP_BOTTOM
        case 5: sx = y, sy = x; break;                    // TRANSPOSE
        case 6: sx = y, sy = H - 1 - x; break;            // ROTATE_270
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;    // TRANSVERSE
        case 8: sx = W - 1 - y, sy = x; break;            // ROTATE_90
      }
      std::memcpy(out.row(y) + size_t(x) * 3, in.row(sy) + size_t(sx) * 3, 3);
    }
  }
  return out;
}

}  // namespace m3::vision
