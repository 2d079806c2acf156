#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>

#include "base/cpu_dispatch.h"

namespace m3 {

double sum_of_squares_reference(const float* x, int64_t n) {
  double s[8] = {};
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; ++i) s[i % 8] += double(x[i]) * double(x[i]);
  for (int64_t i = full; i < n; ++i) s[i - full] += double(x[i]) * double(x[i]);
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

void layer_norm_moments_reference(const float* x, int64_t n, double& mean, double& var) {
  double s[8] = {}, q[8] = {};
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lane = i < full ? i % 8 : i - full;
    s[lane] += double(x[i]);
    q[lane] += double(x[i]) * double(x[i]);
  }
  const double sum = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
  const double squares = ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]));
  mean = sum / double(n);
  var = std::max(0.0, squares / double(n) - mean * mean);
}

namespace {

// The sum of squares in double: it is cheap next to the projections and removes the one reduction
// whose fp32 rounding grows with the row length (6144 in M3).
void rmsnorm_generic(const float* x, const float* scale, int64_t rows, int64_t n, double eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = out + r * n;
    const float inv = float(1.0 / std::sqrt(sum_of_squares_reference(xr, n) / double(n) + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * scale[i];
  }
}

void rope_rotate_generic(float* x, const float* c, const float* s, int half, int heads, int head_dim) {
  for (int h = 0; h < heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int j = 0; j < half; ++j) {
      const float a = v[j], b = v[j + half];
      v[j] = a * c[j] - b * s[j];
      v[j + half] = b * c[j] + a * s[j];
    }
  }
}

void swigluoai_generic(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::fmin(gate[i], limit);
    const float u = std::fmin(std::fmax(up[i], -limit), limit);
    out[i] = g * (1.0f / (1.0f + std::exp(-(alpha * g)))) * (u + 1.0f);
  }
}

void layernorm_generic(const float* x, const float* weight, const float* bias, int64_t rows, int64_t n, double eps,
                       float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = out + r * n;
    double mean, var;
    layer_norm_moments_reference(xr, n, mean, var);
    const float mu = float(mean), inv = float(1.0 / std::sqrt(var + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mu) * inv * weight[i] + bias[i];
  }
}

constexpr ElementwiseKernels kGeneric{rmsnorm_generic, rope_rotate_generic, swigluoai_generic, layernorm_generic};

const PathTables<ElementwiseKernels>& tables() {
  static const PathTables<ElementwiseKernels> t{
      &kGeneric, simd_elementwise_kernels(CpuPath::Avx2), simd_elementwise_kernels(CpuPath::Avx512),
      simd_elementwise_kernels(CpuPath::Neon), simd_elementwise_kernels(CpuPath::Sve)};
  return t;
}

}  // namespace

const ElementwiseKernels& elementwise_kernels() { return tables().active(); }
const ElementwiseKernels& elementwise_kernels_at(CpuPath path) { return tables().at(path); }

}  // namespace m3
