#include "kernels/rope.h"

#include <cmath>

#include "kernels/elementwise.h"

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
  elementwise_kernels().rope_rotate(x, cos_.data() + i * half, sin_.data() + i * half, half, heads, head_dim);
}

}  // namespace m3
