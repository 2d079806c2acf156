#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>

#include "m3/error.h"
#include "vision/resize.h"

namespace m3::vision {
namespace {

// Python's round(): ties to even. Written out so a changed FP rounding mode cannot affect it.
double round_half_even(double x) {
  const double r = std::floor(x);
  const double frac = x - r;  // exact for the magnitudes we see
  if (frac > 0.5) return r + 1.0;
  if (frac < 0.5) return r;
  return std::fmod(r, 2.0) == 0.0 ? r : r + 1.0;
}

// The reference's round_by_factor / floor_by_factor / ceil_by_factor: x / factor in double.
int64_t round_by(double x, int f) { return int64_t(round_half_even(x / f)) * f; }
int64_t floor_by(double x, int f) { return int64_t(std::floor(x / f)) * f; }
int64_t ceil_by(double x, int f) { return int64_t(std::ceil(x / f)) * f; }

ResizedSize by_long_side(int height, int width, const PreprocessConfig& cfg) {
  const int f = cfg.factor();
  const int64_t long_side = std::max(height, width), short_side = std::min(height, width);
  double h = height, w = width;
  // The two branches are exclusive and test the original sides (vLLM _smart_resize_by_long_side).
  if (long_side > *cfg.max_long_side_pixel) {
    const double beta = double(*cfg.max_long_side_pixel) / double(long_side);
    h = height * beta, w = width * beta;
  } else if (short_side < cfg.min_short_side_pixel) {
    const double beta = double(cfg.min_short_side_pixel) / double(short_side);
    h = height * beta, w = width * beta;
  }
  const int64_t hb = std::max<int64_t>(f, round_by(h, f)), wb = std::max<int64_t>(f, round_by(w, f));
  M3_CHECK(!cfg.max_total_pixels || hb * wb <= *cfg.max_total_pixels, "image ", width, "x", height,
           " resizes to ", wb, "x", hb, " = ", hb * wb, " pixels, more than max_total_pixels ",
           *cfg.max_total_pixels);
  return {int(hb), int(wb)};
}

}  // namespace

ResizedSize smart_resize(int height, int width, const PreprocessConfig& cfg) {
  M3_CHECK(height > 0 && width > 0, "image size ", width, "x", height, " is empty");
  const int64_t long_side = std::max(height, width), short_side = std::min(height, width);
  // Integer form of max/min > ratio: exact, unlike the reference's float division (equal here).
  M3_CHECK(long_side <= cfg.max_aspect_ratio * short_side, "image ", width, "x", height, " has aspect ratio ",
           double(long_side) / double(short_side), ", more than the limit of ", cfg.max_aspect_ratio);
  if (cfg.max_long_side_pixel) return by_long_side(height, width, cfg);

  const int f = cfg.factor();
  int64_t hb = std::max<int64_t>(f, round_by(height, f));
  int64_t wb = std::max<int64_t>(f, round_by(width, f));
  if (hb * wb > cfg.max_pixels) {
    const double beta = std::sqrt(double(int64_t(height) * width) / double(cfg.max_pixels));
    // max(f, ...) only matters for bounds far below the defaults, where the reference would
    // produce a 0-pixel side and fail; with the defaults and ratio <= 200 the floor is >= 28.
    hb = std::max<int64_t>(f, floor_by(height / beta, f));
    wb = std::max<int64_t>(f, floor_by(width / beta, f));
  } else if (hb * wb < cfg.min_pixels) {
    const double beta = std::sqrt(double(cfg.min_pixels) / double(int64_t(height) * width));
    hb = ceil_by(height * beta, f);
    wb = ceil_by(width * beta, f);
  }
  return {int(hb), int(wb)};
}

float normalize_level(int v, int c, const PreprocessConfig& cfg) {
  // vLLM's processor (transformers BaseImageProcessorFast) fuses rescale into normalize, in float32:
  // mean' = mean * (1 / (1/255)) = mean * 255, std' likewise, out = (v - mean') / std'.
  // (The slow HF path, (v/255 - mean) / std, differs by at most an ulp or two.)
  // torch.tensor(list) rounds the doubles to float32 first; the products are float32 too.
  const float mean = float(cfg.mean[c]) * 255.0f, std = float(cfg.std[c]) * 255.0f;
  return (float(v) - mean) / std;
}

PixelValues patchify(const std::vector<RgbImage>& frames, const PreprocessConfig& cfg) {
  M3_CHECK(!frames.empty(), "patchify: no frames");
  const int H = frames[0].height, W = frames[0].width, f = cfg.factor();
  M3_CHECK(H > 0 && W > 0 && H % f == 0 && W % f == 0, "patchify: frame size ", W, "x", H,
           " is not a positive multiple of ", f);
  for (const RgbImage& fr : frames)
    M3_CHECK(fr.width == W && fr.height == H, "patchify: frames differ in size (", fr.width, "x", fr.height,
             " vs ", W, "x", H, ")");

  const int ps = cfg.patch_size, m = cfg.merge_size, tp = cfg.temporal_patch_size;
  float lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c][v] = normalize_level(v, c, cfg);

  PixelValues out;
  const int64_t padded = (int64_t(frames.size()) + tp - 1) / tp * tp;  // repeat the last frame
  out.grid = {padded / tp, H / ps, W / ps};
  out.rows = out.grid.patches();
  out.cols = cfg.patch_values();
  out.data.resize(size_t(out.rows * out.cols));

  const int64_t blocks_h = out.grid.h / m, blocks_w = out.grid.w / m;
  float* dst = out.data.data();
  // Rows in token order (t, bh, bw, sh, sw): each 2x2 merge window is 4 consecutive rows.
  // Inside a row: (c, tp, ph, pw).
  for (int64_t t = 0; t < out.grid.t; ++t)
    for (int64_t bh = 0; bh < blocks_h; ++bh)
      for (int64_t bw = 0; bw < blocks_w; ++bw)
        for (int sh = 0; sh < m; ++sh)
          for (int sw = 0; sw < m; ++sw) {
            const int64_t y0 = (bh * m + sh) * ps, x0 = (bw * m + sw) * ps;
            for (int c = 0; c < 3; ++c)
              for (int k = 0; k < tp; ++k) {
                const size_t fi = std::min<size_t>(size_t(t * tp + k), frames.size() - 1);
                for (int ph = 0; ph < ps; ++ph) {
                  const uint8_t* src = frames[fi].row(int(y0 + ph)) + x0 * 3 + c;
                  for (int pw = 0; pw < ps; ++pw) *dst++ = lut[c][src[pw * 3]];
                }
              }
          }
  return out;
}

PixelValues preprocess_image(const RgbImage& image, const PreprocessConfig& cfg) {
  const ResizedSize size = smart_resize(image.height, image.width, cfg);
  return patchify({resize_bicubic(image, size.width, size.height)}, cfg);
}

}  // namespace m3::vision
