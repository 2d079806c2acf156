#pragma once
// Image files -> 8-bit RGB pixels, the way the reference pipeline sees them.
//
// The reference (vLLM's MiniMax-M3 loader) opens images with Pillow, applies the EXIF orientation,
// and converts to RGB, compositing any transparency onto a white background. We reproduce that:
//   PNG, BMP, GIF (first frame): stb_image (lossless, so the pixels are Pillow's exactly);
//   JPEG: libjpeg-turbo when the build defines M3_HAVE_LIBJPEG (the library Pillow itself uses:
//         bit-identical), stb_image otherwise (its IDCT and chroma upsampling differ from libjpeg's
//         by a few levels, more for 4:2:2 subsampling).
// Details that follow Pillow/vLLM rather than intuition are listed in docs/VISION_TOKENS.md.
// Frames of a video are RgbImage too; everything downstream takes RgbImage.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace m3::vision {

// Row-major, 3 interleaved bytes (R, G, B) per pixel, no row padding.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3

  RgbImage() = default;
  RgbImage(int w, int h) : width(w), height(h), pixels(size_t(w) * size_t(h) * 3) {}
  uint8_t* row(int y) { return pixels.data() + size_t(y) * size_t(width) * 3; }
  const uint8_t* row(int y) const { return pixels.data() + size_t(y) * size_t(width) * 3; }
};

struct DecodeOptions {
  // Refused before any pixel is decoded (the header gives the size). Pillow warns at this count
  // (Image.MAX_IMAGE_PIXELS) and refuses twice it; we refuse earlier to bound server memory.
  int64_t max_pixels = 89'478'485;
  // Transparent pixels are blended onto this colour (vLLM's rgba_to_rgb default: white).
  uint8_t background[3] = {255, 255, 255};
  // Rotate/flip by the EXIF Orientation tag (JPEG APP1, PNG eXIf), as Pillow's exif_transpose.
  bool apply_exif_orientation = true;
};

// Decodes PNG, JPEG, BMP or GIF (first frame). Throws m3::Error naming `name` (the file or
// "request image 2") and the problem: unreadable, unsupported format, corrupt, truncated,
// zero size, or more than max_pixels.
RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name,
                      const DecodeOptions& options = {});
RgbImage decode_image_file(const std::string& path, const DecodeOptions& options = {});

// "libjpeg-turbo" or "stb_image": which decoder this build uses for JPEG (tests adapt their tolerance).
const char* jpeg_decoder_name();

// Applies EXIF orientation 1..8 (TIFF tag 0x0112) to an image; other values leave it unchanged.
RgbImage apply_orientation(const RgbImage& image, int orientation);

}  // namespace m3::vision
