// elementwise.h's kernels from one source for every SIMD target (Google Highway), as
// vec_ops_simd.cpp does: foreach_target.h compiles this file once per target and the HWY_ONCE
// part hands out the tables. Nothing here instantiates a std:: template. Compiled with
// -ffp-contract=off (CMakeLists.txt), so the rotation's products and sums are never fused and equal
// the generic path's.
#include "base/simd_targets.h"  // the targets compiled; M3_HWY_TABLE_OF
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <math.h>

#include <cstdint>

#include "kernels/elementwise.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using D2 = hn::FixedTag<double, 2>;  // the sum of squares: 8 lanes as four pairs on every target
using DF2 = hn::Rebind<float, D2>;

// sum_of_squares_reference's order: lanes (0,1), (2,3), (4,5), (6,7) in four registers.
double SumOfSquares(const float* x, int64_t n) {
  const D2 d2;
  const DF2 df2;
  auto a = hn::Zero(d2), b = a, c = a, d = a;
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) {
    const auto x0 = hn::PromoteTo(d2, hn::LoadU(df2, x + i)), x1 = hn::PromoteTo(d2, hn::LoadU(df2, x + i + 2));
    const auto x2 = hn::PromoteTo(d2, hn::LoadU(df2, x + i + 4)), x3 = hn::PromoteTo(d2, hn::LoadU(df2, x + i + 6));
    a = hn::MulAdd(x0, x0, a);  // x² is exact in double: fused or not, the same sum
    b = hn::MulAdd(x1, x1, b);
    c = hn::MulAdd(x2, x2, c);
    d = hn::MulAdd(x3, x3, d);
  }
  HWY_ALIGN double s[8];
  hn::Store(a, d2, s);
  hn::Store(b, d2, s + 2);
  hn::Store(c, d2, s + 4);
  hn::Store(d, d2, s + 6);
  for (int64_t i = full; i < n; ++i) s[i - full] += double(x[i]) * double(x[i]);
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

void RmsNorm(const float* x, const float* scale, int64_t rows, int64_t n, double eps, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = out + r * n;
    const float inv = float(1.0 / sqrt(SumOfSquares(xr, n) / double(n) + eps));
    const auto vinv = hn::Set(df, inv);
    int64_t i = 0;
    for (; i + N <= n; i += N)
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, xr + i), vinv), hn::LoadU(df, scale + i)), df, yr + i);
    for (; i < n; ++i) yr[i] = xr[i] * inv * scale[i];
  }
}

// layer_norm_moments_reference's sums: Σx and Σx², lanes (0,1) .. (6,7) in four registers each.
void LayerNormMoments(const float* x, int64_t n, double& mean, double& var) {
  const D2 d2;
  const DF2 df2;
  auto s0 = hn::Zero(d2), s1 = s0, s2 = s0, s3 = s0, q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) {
    const auto x0 = hn::PromoteTo(d2, hn::LoadU(df2, x + i)), x1 = hn::PromoteTo(d2, hn::LoadU(df2, x + i + 2));
    const auto x2 = hn::PromoteTo(d2, hn::LoadU(df2, x + i + 4)), x3 = hn::PromoteTo(d2, hn::LoadU(df2, x + i + 6));
    s0 = hn::Add(s0, x0);
    s1 = hn::Add(s1, x1);
    s2 = hn::Add(s2, x2);
    s3 = hn::Add(s3, x3);
    q0 = hn::MulAdd(x0, x0, q0);  // x² is exact in double: fused or not, the same sum
    q1 = hn::MulAdd(x1, x1, q1);
    q2 = hn::MulAdd(x2, x2, q2);
    q3 = hn::MulAdd(x3, x3, q3);
  }
  HWY_ALIGN double s[8], q[8];
  hn::Store(s0, d2, s);
  hn::Store(s1, d2, s + 2);
  hn::Store(s2, d2, s + 4);
  hn::Store(s3, d2, s + 6);
  hn::Store(q0, d2, q);
  hn::Store(q1, d2, q + 2);
  hn::Store(q2, d2, q + 4);
  hn::Store(q3, d2, q + 6);
  for (int64_t i = full; i < n; ++i) {
    s[i - full] += double(x[i]);
    q[i - full] += double(x[i]) * double(x[i]);
  }
  const double sum = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
  const double squares = ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]));
  mean = sum / double(n);
  const double v = squares / double(n) - mean * mean;
  var = v > 0.0 ? v : 0.0;
}

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t rows, int64_t n, double eps,
               float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = out + r * n;
    double mean, var;
    LayerNormMoments(xr, n, mean, var);
    const float mu = float(mean), inv = float(1.0 / sqrt(var + eps));
    const auto vmu = hn::Set(df, mu), vinv = hn::Set(df, inv);
    int64_t i = 0;
    for (; i + N <= n; i += N) {
      const auto t = hn::Mul(hn::Mul(hn::Sub(hn::LoadU(df, xr + i), vmu), vinv), hn::LoadU(df, weight + i));
      hn::StoreU(hn::Add(t, hn::LoadU(df, bias + i)), df, yr + i);
    }
    for (; i < n; ++i) yr[i] = (xr[i] - mu) * inv * weight[i] + bias[i];
  }
}

void RopeRotate(float* x, const float* c, const float* s, int half, int heads, int head_dim) {
  const DF df;
  const int N = int(hn::Lanes(df));
  for (int h = 0; h < heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    int j = 0;
    for (; j + N <= half; j += N) {
      const auto a = hn::LoadU(df, v + j), b = hn::LoadU(df, v + j + half);
      const auto cj = hn::LoadU(df, c + j), sj = hn::LoadU(df, s + j);
      hn::StoreU(hn::Sub(hn::Mul(a, cj), hn::Mul(b, sj)), df, v + j);
      hn::StoreU(hn::Add(hn::Mul(b, cj), hn::Mul(a, sj)), df, v + j + half);
    }
    for (; j < half; ++j) {
      const float a = v[j], b = v[j + half];
      v[j] = a * c[j] - b * s[j];
      v[j + half] = b * c[j] + a * s[j];
    }
  }
}

// σ(z) from e = exp(-|z|) <= 1, which never overflows: 1 / (1 + e) for z >= 0, e / (1 + e) below.
HWY_INLINE hn::Vec<DF> Sigmoid(DF df, hn::Vec<DF> z) {
  const auto one = hn::Set(df, 1.0f);
  const auto e = hn::Exp(df, hn::Neg(hn::Abs(z)));
  const auto r = hn::Div(one, hn::Add(one, e));
  return hn::IfThenElse(hn::Ge(z, hn::Zero(df)), r, hn::Mul(e, r));
}

void SwigluOai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto lim = hn::Set(df, limit), neg_lim = hn::Set(df, -limit), va = hn::Set(df, alpha);
  const auto one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::Min(hn::LoadU(df, gate + i), lim);
    const auto u = hn::Min(hn::Max(hn::LoadU(df, up + i), neg_lim), lim);
    hn::StoreU(hn::Mul(hn::Mul(g, Sigmoid(df, hn::Mul(va, g))), hn::Add(u, one)), df, out + i);
  }
  if (i < n) {  // the tail through full vectors in a buffer
    HWY_ALIGN float bg[64] = {}, bu[64] = {}, bo[64];
    const int64_t rest = n - i;  // < N <= 64
    for (int64_t t = 0; t < rest; ++t) {
      bg[t] = gate[i + t];
      bu[t] = up[i + t];
    }
    const auto g = hn::Min(hn::Load(df, bg), lim);
    const auto u = hn::Min(hn::Max(hn::Load(df, bu), neg_lim), lim);
    hn::Store(hn::Mul(hn::Mul(g, Sigmoid(df, hn::Mul(va, g))), hn::Add(u, one)), df, bo);
    for (int64_t t = 0; t < rest; ++t) out[i + t] = bo[t];
  }
}

}  // namespace

const ElementwiseKernels kElementwise{RmsNorm, RopeRotate, SwigluOai, LayerNorm};

}  // namespace HWY_NAMESPACE
}  // namespace m3
#endif
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace m3 {

const ElementwiseKernels* simd_elementwise_kernels(CpuPath path) {
  return M3_HWY_TABLE_OF(ElementwiseKernels, kElementwise, path);
}

}  // namespace m3
#endif
