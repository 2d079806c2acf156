#include "format/mxfp8_quantize.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "m3/dtype.h"
#include "m3/error.h"

namespace m3 {

namespace {

// The 127 non-negative finite E4M3 values, ascending with the code (0x00 .. 0x7e).
const std::array<float, 127>& e4m3_values() {
  static const std::array<float, 127> v = [] {
    std::array<float, 127> a{};
    for (int c = 0; c < 127; ++c) a[size_t(c)] = f8e4m3_to_f32(uint8_t(c));
    return a;
  }();
  return v;
}

}  // namespace

uint8_t f32_to_f8e4m3(float v) {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const float a = std::fabs(v);
  const auto& vals = e4m3_values();
  if (a >= vals[126]) return uint8_t(sign | 126);  // saturate at 448
  const size_t hi = size_t(std::upper_bound(vals.begin(), vals.end(), a) - vals.begin());  // vals[hi-1] <= a < vals[hi]
  const size_t lo = hi - 1;
  const float dl = a - vals[lo], dh = vals[hi] - a;
  const size_t code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return uint8_t(sign | code);
}

void mxfp8_quantize_row(const float* w, int64_t cols, uint8_t* q, uint8_t* scales) {
  M3_CHECK(cols % 32 == 0, "mxfp8: a row of ", cols, " weights is not a whole number of 32-blocks");
  for (int64_t b = 0; b < cols / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(w[b * 32 + i]));
    int e = 0;
    if (amax > 0.0f) {
      e = int(std::ceil(std::log2(double(amax) / 448.0)));
      // log2 rounding: make sure the block fits, and take the smallest exponent that does.
      while (double(amax) / std::ldexp(1.0, e) > 448.0) ++e;
      while (e > -127 && double(amax) / std::ldexp(1.0, e - 1) <= 448.0) --e;
    }
    e = std::clamp(e, -127, 127);
    scales[b] = uint8_t(e + 127);
    const double inv = std::ldexp(1.0, -e);
    for (int i = 0; i < 32; ++i) q[b * 32 + i] = f32_to_f8e4m3(float(double(w[b * 32 + i]) * inv));
  }
}

}  // namespace m3
