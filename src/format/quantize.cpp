#include "format/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "m3/error.h"
#include "format/mxfp8_quantize.h"

namespace m3 {

void affine_quantize_row(const float* w, int64_t cols, int bits, int group, uint32_t* words, uint16_t* scales,
                         uint16_t* biases) {
  M3_CHECK((bits == 4 || bits == 8) && group > 0 && cols % group == 0 && group % (32 / bits) == 0,
           "affine quantization: ", bits, "-bit groups of ", group, " for ", cols, " columns");
  const int per_word = 32 / bits;
  const float n_bins = float((1 << bits) - 1);
  std::fill_n(words, cols / per_word, 0u);
  for (int64_t g = 0; g < cols / group; ++g) {
    const float* v = w + g * group;
    const auto [lo, hi] = std::minmax_element(v, v + group);
    const bool min_is_edge = std::fabs(*lo) > std::fabs(*hi);
    const float step = std::max((*hi - *lo) / n_bins, 1e-7f);
    scales[g] = f32_to_bf16(min_is_edge ? step : -step);
    biases[g] = f32_to_bf16(min_is_edge ? *lo : *hi);
    // Round against the stored (bf16) scale and bias: what the dequantization will use.
    const double s = bf16_to_f32(scales[g]), b = bf16_to_f32(biases[g]);
    for (int64_t i = 0; i < group; ++i) {
      const int64_t c = g * group + i;
      const double q = std::clamp(std::nearbyint((double(v[i]) - b) / s), 0.0, double(n_bins));
      words[c / per_word] |= uint32_t(q) << (bits * (c % per_word));
    }
  }
}

bool can_quantize_to(const WeightFormat& format) {
  return format.dense() || &format == &mxfp8_format() || affine_params(format).has_value();
}

void quantize_row(const WeightFormat& format, const float* w, int64_t cols, uint8_t* main, uint8_t* const* side) {
  if (format.dense()) {
    switch (format.element) {
      case DType::F32: std::memcpy(main, w, size_t(cols) * sizeof(float)); return;
      case DType::BF16:
        for (int64_t c = 0; c < cols; ++c) reinterpret_cast<uint16_t*>(main)[c] = f32_to_bf16(w[c]);
        return;
      case DType::F16:
        for (int64_t c = 0; c < cols; ++c) reinterpret_cast<uint16_t*>(main)[c] = f32_to_f16(w[c]);
        return;
      default: break;
    }
  }
  if (&format == &mxfp8_format()) {
    mxfp8_quantize_row(w, cols, main, side[0]);
    return;
  }
  if (const std::optional<AffineParams> a = affine_params(format)) {
    affine_quantize_row(w, cols, a->bits, a->group, reinterpret_cast<uint32_t*>(main),
                        reinterpret_cast<uint16_t*>(side[0]), reinterpret_cast<uint16_t*>(side[1]));
    return;
  }
  fail("quantize: cannot write weight format ", format.name);
}

}  // namespace m3
