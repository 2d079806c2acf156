#include "kernels/norm.h"

#include <cmath>

namespace m3 {

void gemma_rmsnorm(const float* x, const float* scale, int64_t rows, int64_t n, double eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = out + r * n;
    // The sum of squares in double: it is cheap next to the projections and removes the one
    // reduction whose fp32 rounding grows with the row length (6144 in M3).
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * double(xr[i]);
    const float inv = float(1.0 / std::sqrt(ss / double(n) + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * scale[i];
  }
}

}  // namespace m3
