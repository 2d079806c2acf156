#include "kernels/rope.h"

#include <cmath>

namespace m3 {

void RopeTable::build(const int64_t* positions, int64_t count) {
  const int half = rotary_dim_ / 2;
  cos_.resize(size_t(count) * half);
  sin_.resize(size_t(count) * half);
  for (int64_t i = 0; i < count; ++i)
    for (int j = 0; j < half; ++j) {
      const double inv_freq = std::pow(theta_, -2.0 * j / double(rotary_dim_));
      const double angle = double(positions[i]) * inv_freq;
      cos_[i * half + j] = float(std::cos(angle));
      sin_[i * half + j] = float(std::sin(angle));
    }
}

void RopeTable::apply(float* x, int64_t i, int heads, int head_dim) const {
  const int half = rotary_dim_ / 2;
  const float* c = cos_.data() + i * half;
  const float* s = sin_.data() + i * half;
  for (int h = 0; h < heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int j = 0; j < half; ++j) {
      const float a = v[j], b = v[j + half];
      v[j] = a * c[j] - b * s[j];
      v[j + half] = b * c[j] + a * s[j];
    }
  }
}

}  // namespace m3
