// Image decoding from bytes (PNG, JPEG, BMP, GIF as a request's data: URL or an uploaded file):
// decode_image must either refuse with m3::Error or return an image whose pixel buffer is what
// its size says. The pixel budget is lowered to 4 megapixels so that a header that claims a huge
// size is refused quickly, or shows up as a slow input (-timeout) or an out-of-memory (-rss_limit_mb)
// when the budget check is missing.
#include <cstdint>

#include "m3/error.h"
#include "fuzz_support.h"
#include "vision/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace m3::vision;
  DecodeOptions options;
  options.max_pixels = 4 << 20;
  try {
    const RgbImage img = decode_image(data, size, "fuzz image", options);
    if (img.width <= 0 || img.height <= 0 || int64_t(img.width) * img.height > options.max_pixels ||
        img.pixels.size() != size_t(img.width) * size_t(img.height) * 3)
      m3::fuzz::finding(m3::str_cat("decoded image of ", img.width, "x", img.height, " with ", img.pixels.size(),
                                    " bytes of pixels, budget ", options.max_pixels));
  } catch (const m3::Error&) {
  }
  return 0;
}
