// vec_ops.h's primitives from one source for every SIMD target (Google Highway), as
// attention_kernels_simd.cpp does: foreach_target.h compiles this file once per target and the
// HWY_ONCE part hands out the tables. Nothing here instantiates a std:: template.
#include "base/simd_targets.h"  // the targets compiled; M3_HWY_TABLE_OF
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vec_ops_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>

#include "kernels/vec_ops.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

float Dot(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {  // two chains hide the FMA latency
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

const VecOps kVecOps{Dot, Axpy};

}  // namespace HWY_NAMESPACE
}  // namespace m3
#endif
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace m3 {

const VecOps* simd_vec_ops(CpuPath path) {
  return M3_HWY_TABLE_OF(VecOps, kVecOps, path);
}

}  // namespace m3
#endif
