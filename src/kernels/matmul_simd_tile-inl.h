// What the Highway matmul tiles share (kernels/matmul_simd.cpp for the dense formats,
// kernels/matmul_blocked_simd.cpp for the blocked ones): the fixed 16-lane sum, and the named
// accumulators of a tile with their loads, stores and passes. Highway's per-target header
// convention: each file includes this after hwy/foreach_target.h, once per target, and gets that
// target's copy in m3::matmul_detail::HWY_NAMESPACE. The macros are the same text every time.
#if defined(M3_KERNELS_MATMUL_SIMD_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef M3_KERNELS_MATMUL_SIMD_TILE_INL_H_
#undef M3_KERNELS_MATMUL_SIMD_TILE_INL_H_
#else
#define M3_KERNELS_MATMUL_SIMD_TILE_INL_H_
#endif

#include <hwy/highway.h>

#include "kernels/matmul_tile.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace matmul_detail {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, kLanes>;  // 4, 8 or 16 lanes: a wider SVE machine runs 16
using VF = hn::Vec<DF>;

// The fixed 16-lane sum (matmul_tile.h): s8 and s4 as 4-lane vector adds (the same additions
// lane by lane), s2 and the total in scalar adds, where fifteen scalar adds per output were ~4%
// of an AVX2 panel tile at K = 512 (docs/BENCHMARKS.md §0l).
HWY_INLINE float Reduce16(const float* a) {
  const hn::FixedTag<float, 4> d4;
  const auto s8_lo = hn::Add(hn::LoadU(d4, a), hn::LoadU(d4, a + 8));       // s8[0..3]
  const auto s8_hi = hn::Add(hn::LoadU(d4, a + 4), hn::LoadU(d4, a + 12));  // s8[4..7]
  HWY_ALIGN float s4[4];
  hn::Store(hn::Add(s8_lo, s8_hi), d4, s4);
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

template <int m>
HWY_INLINE VF PickX(VF x0, VF x1, VF x2, VF x3) {
  if constexpr (m == 0) return x0;
  else if constexpr (m == 1) return x1;
  else if constexpr (m == 2) return x2;
  else return x3;
}

// Named accumulators acc0..acc23 (SVE vectors cannot live in arrays); accumulator k belongs to
// x row k % MR and weight row k / MR, and the ones past MR·NR compile away.
#define M3_ACC24(M)                                                                                                  \
  M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) M(16) M(17) M(18) M(19) M(20) \
  M(21) M(22) M(23)
#define M3_MM_DECL(k) VF acc##k = hn::Zero(df);
// Accumulator k from (or to) its output's saved lanes: lanes[(m·NR + j)·16 + lane0].
#define M3_MM_LOAD(k) \
  if constexpr (k < MR * NR) acc##k = hn::LoadU(df, lanes + ((k % MR) * NR + k / MR) * kLanes + lane0);
#define M3_MM_STORE(k) \
  if constexpr (k < MR * NR) hn::StoreU(acc##k, df, lanes + ((k % MR) * NR + k / MR) * kLanes + lane0);
// One FMA of the pass: a weight row is widened when its first accumulator comes up.
#define M3_MM_FMA(k)                                                  \
  if constexpr (k < MR * NR) {                                        \
    if constexpr (k % MR == 0) w = WEIGHT(k / MR);                    \
    acc##k = hn::MulAdd(PickX<k % MR>(x0, x1, x2, x3), w, acc##k);    \
  }
// Pass kPass of one block for the current chunk: x rows at xb (xs apart, already offset by the
// chunk's first lane), weight row j from WEIGHT(j).
#define M3_MM_PASS(PASS)                                                      \
  {                                                                           \
    constexpr int kPass = PASS;                                               \
    const float* xp = xb + kPass * kLanes;                                    \
    x0 = hn::LoadU(df, xp);                                                   \
    if constexpr (MR > 1) x1 = hn::LoadU(df, xp + xs);                        \
    if constexpr (MR > 2) x2 = hn::LoadU(df, xp + 2 * xs);                    \
    if constexpr (MR > 3) x3 = hn::LoadU(df, xp + 3 * xs);                    \
    M3_ACC24(M3_MM_FMA)                                                       \
  }

}  // namespace HWY_NAMESPACE
}  // namespace matmul_detail
}  // namespace m3
#endif
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
