#include "vision/resize.h"

#include <algorithm>
#include <cmath>

#include "m3/error.h"

namespace m3::vision {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS for 8-bit images

// Keys cubic convolution kernel with a = -0.5 (Pillow's bicubic_filter), support 2.
double cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// Weights of one output pixel along one axis: taps [first, first + weights.size()).
struct Taps {
  int first = 0;
  std::vector<double> weights;  // normalised to sum 1
  std::vector<int32_t> fixed;   // weights * 2^22, rounded half away from zero
};

// Mirrors Pillow's precompute_coeffs for the box (0, in_size): same expressions in the same order,
// in double, so the chosen taps and their weights are identical.
std::vector<Taps> taps_for(int in_size, int out_size) {
  const double scale = double(in_size) / double(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  const double inv = 1.0 / filter_scale;
  std::vector<Taps> all(static_cast<size_t>(out_size));
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // (int) truncates toward zero, exactly as the C cast in Pillow.
    const int lo = std::max(int(center - support + 0.5), 0);
    const int hi = std::min(int(center + support + 0.5), in_size);
    Taps& t = all[size_t(i)];
    t.first = lo;
    double sum = 0.0;
    for (int x = lo; x < hi; ++x) {
      const double w = cubic((x - center + 0.5) * inv);
      t.weights.push_back(w);
      sum += w;
    }
    if (sum != 0.0)
      for (double& w : t.weights) w /= sum;
    for (double w : t.weights)
      t.fixed.push_back(int32_t(w < 0 ? w * (1 << kPrecisionBits) - 0.5 : w * (1 << kPrecisionBits) + 0.5));
  }
  return all;
}

uint8_t clip8(int32_t acc) {
  // C++20 defines >> of a negative value as arithmetic (floor), as Pillow relies on.
  return uint8_t(std::clamp(acc >> kPrecisionBits, 0, 255));
}

RgbImage resize_horizontal(const RgbImage& in, int out_w) {
  const std::vector<Taps> taps = taps_for(in.width, out_w);
  RgbImage out(out_w, in.height);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y);
    for (int x = 0; x < out_w; ++x) {
      const Taps& t = taps[size_t(x)];
      int32_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      const uint8_t* s = src + size_t(t.first) * 3;
      for (size_t k = 0; k < t.fixed.size(); ++k, s += 3) {
        acc[0] += s[0] * t.fixed[k];
        acc[1] += s[1] * t.fixed[k];
        acc[2] += s[2] * t.fixed[k];
      }
      dst[3 * x] = clip8(acc[0]), dst[3 * x + 1] = clip8(acc[1]), dst[3 * x + 2] = clip8(acc[2]);
    }
  }
  return out;
}

RgbImage resize_vertical(const RgbImage& in, int out_h) {
  const std::vector<Taps> taps = taps_for(in.height, out_h);
  const size_t row_bytes = size_t(in.width) * 3;
  RgbImage out(in.width, out_h);
  std::vector<int32_t> acc(row_bytes);
  for (int y = 0; y < out_h; ++y) {
    const Taps& t = taps[size_t(y)];
    // Row-at-a-time accumulation: same integer sums as Pillow's per-pixel loop, cache-friendly.
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (size_t k = 0; k < t.fixed.size(); ++k) {
      const uint8_t* s = in.row(t.first + int(k));
      const int32_t w = t.fixed[k];
      for (size_t i = 0; i < row_bytes; ++i) acc[i] += s[i] * w;
    }
    uint8_t* dst = out.row(y);
    for (size_t i = 0; i < row_bytes; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

void check_sizes(const RgbImage& image, int out_w, int out_h) {
  M3_CHECK(image.width > 0 && image.height > 0, "resize: empty input image");
  M3_CHECK(out_w > 0 && out_h > 0, "resize: target size ", out_w, "x", out_h, " must be positive");
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, int out_w, int out_h) {
  check_sizes(image, out_w, out_h);
  // Pillow: horizontal first (only the rows the vertical pass reads; here all of them, since the
  // box is the whole image), each pass only when that side changes.
  if (out_w == image.width && out_h == image.height) return image;
  if (out_h == image.height) return resize_horizontal(image, out_w);
  if (out_w == image.width) return resize_vertical(image, out_h);
  return resize_vertical(resize_horizontal(image, out_w), out_h);
}

std::vector<double> resize_bicubic_reference(const RgbImage& image, int out_w, int out_h) {
  check_sizes(image, out_w, out_h);
  const std::vector<Taps> tx = taps_for(image.width, out_w);
  const std::vector<Taps> ty = taps_for(image.height, out_h);
  // Horizontal pass kept in double but clamped to 0..255 like the 8-bit intermediate, so the
  // only difference from resize_bicubic is rounding.
  std::vector<double> mid(size_t(image.height) * size_t(out_w) * 3);
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < out_w; ++x)
      for (int c = 0; c < 3; ++c) {
        double v = 0;
        const Taps& t = tx[size_t(x)];
        for (size_t k = 0; k < t.weights.size(); ++k) v += image.row(y)[(t.first + k) * 3 + size_t(c)] * t.weights[k];
        mid[(size_t(y) * size_t(out_w) + size_t(x)) * 3 + size_t(c)] = out_w == image.width ? image.row(y)[size_t(x) * 3 + size_t(c)] : std::clamp(v, 0.0, 255.0);
      }
  std::vector<double> out(size_t(out_h) * size_t(out_w) * 3);
  for (int y = 0; y < out_h; ++y)
    for (size_t i = 0; i < size_t(out_w) * 3; ++i) {
      double v = 0;
      const Taps& t = ty[size_t(y)];
      for (size_t k = 0; k < t.weights.size(); ++k) v += mid[size_t(t.first + int(k)) * size_t(out_w) * 3 + i] * t.weights[k];
      out[size_t(y) * size_t(out_w) * 3 + i] = out_h == image.height ? mid[size_t(y) * size_t(out_w) * 3 + i] : std::clamp(v, 0.0, 255.0);
    }
  return out;
}

}  // namespace m3::vision
