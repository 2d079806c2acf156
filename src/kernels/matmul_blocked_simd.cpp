// The blocked weight formats' panel fills (MXFP8, affine 4- and 8-bit) from one source for the
// Highway targets, as matmul_simd.cpp does for the dense formats' tiles: NEON and SVE, which had
// only the formats' scalar dequantize_cols, and AVX2, to measure this code against the
// hand-written AVX2 fills on an x86 machine (docs/BENCHMARKS.md §0n). Each 32-block of a row is
// widened to fp32 in the lane order of matmul_tile.h (MXFP8 and 8-bit sequential, 4-bit in pairs),
// to the values of the format's scalar dequantize_cols, bit for bit:
//   * affine: scale x q is exact in fp32 (a bf16 scale has 8 significant bits, q at most 8), so
//     the one rounding is the bias's addition, fused or not;
//   * MXFP8: an E4M3 byte becomes the F16 of value e4m3 x 2^-8 with two integer operations (the
//     byte sign-extended, shifted up by 7, bit 14 cleared: matmul_mxfp8.cpp), which widens to
//     fp32 exactly, and one multiply by 2^(s - 119) rounds the product once, as the tables'
//     e4m3 x 2^(s - 127) does. A block with a NaN code (0x7f, 0xff) or a scale past 246 (where
//     2^(s - 119) is not a finite fp32) takes the tables; real checkpoints have neither.
// The generic path keeps the scalar code: it is the reference the others are checked against.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3 | HWY_AVX3_DL | HWY_SVE2 | HWY_SVE2_128 | HWY_SVE_256)
#endif
#include "base/simd_targets.h"  // M3_HWY_TABLE_OF
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_blocked_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstdint>

#include "kernels/matmul_tile.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace matmul_detail {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, kLanes>;  // 4, 8 or 16 lanes
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DI8 = hn::Rebind<int8_t, DF>;
using DI16 = hn::Rebind<int16_t, DF>;
using DF16 = hn::Rebind<hwy::float16_t, DF>;
using VF = hn::Vec<DF>;

constexpr int kPrefetchBytes = 512;  // each row is asked for this far ahead

// Affine: `Bits`-bit values, element 0 in the lowest bits (a byte holds two 4-bit values), and a
// bf16 scale and bias per group of 1, 2 or 4 blocks.
template <int Bits>
HWY_NOINLINE void AffineFill(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                             float* panel) {
  const DF df;
  const DI di;
  const DU du;
  const DU8 du8;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int kBlockBytes = kBlock * Bits / 8;
  const int group_shift = __builtin_ctzll(uint64_t(w.format->block_cols / kBlock));
  for (int j = 0; j < rows; ++j) {
    const int64_t r = n + j * row_step;
    const uint8_t* q = w.row_ptr(r);
    const uint16_t* scales = reinterpret_cast<const uint16_t*>(w.side_row(0, r));
    const uint16_t* biases = reinterpret_cast<const uint16_t*>(w.side_row(1, r));
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const int64_t g = kb >> group_shift;
      const VF scale = hn::Set(df, bf16_to_f32(scales[g])), bias = hn::Set(df, bf16_to_f32(biases[g]));
      const uint8_t* p = q + kb * kBlockBytes;
      hwy::Prefetch(p + kPrefetchBytes);
      float* out = panel + ((kb - kb0) * rows + j) * kBlock;
      for (int64_t l0 = 0; l0 < kLanes; l0 += N) {
        hn::Vec<DU> v0, v1;
        if constexpr (Bits == 4) {  // the pair order: byte l's low nibble is pass 0, its high one pass 1
          const hn::Vec<DU> v = hn::PromoteTo(du, hn::LoadU(du8, p + l0));
          v0 = hn::And(v, hn::Set(du, 0x0fu));
          v1 = hn::ShiftRight<4>(v);
        } else {  // the sequential order: bytes 0-15 are pass 0, 16-31 pass 1
          v0 = hn::PromoteTo(du, hn::LoadU(du8, p + l0));
          v1 = hn::PromoteTo(du, hn::LoadU(du8, p + kLanes + l0));
        }
        hn::Store(hn::MulAdd(hn::ConvertTo(df, hn::BitCast(di, v0)), scale, bias), df, out + l0);
        hn::Store(hn::MulAdd(hn::ConvertTo(df, hn::BitCast(di, v1)), scale, bias), df, out + kLanes + l0);
      }
    }
  }
}

// Whether a block of 32 E4M3 bytes holds a NaN code (magnitude 0x7f).
HWY_INLINE bool HasNanCode(const uint8_t* p) {
  const hn::CappedTag<uint8_t, kBlock> d8;
  const int64_t N = int64_t(hn::Lanes(d8));
  const auto magnitude = hn::Set(d8, uint8_t{0x7f});
  for (int64_t i = 0; i < kBlock; i += N)
    if (!hn::AllFalse(d8, hn::Eq(hn::And(hn::LoadU(d8, p + i), magnitude), magnitude))) return true;
  return false;
}

// N E4M3 bytes at p as fp32 values e4m3 x 2^-8 (exact).
HWY_INLINE VF E4m3Scaled(const uint8_t* p) {
  const DI16 di16;
  const hn::Vec<DI16> h = hn::And(hn::ShiftLeft<7>(hn::PromoteTo(di16, hn::LoadU(DI8(), reinterpret_cast<const int8_t*>(p)))),
                                  hn::Set(di16, int16_t(0xbf80)));
  return hn::PromoteTo(DF(), hn::BitCast(DF16(), h));
}

HWY_NOINLINE void Mxfp8Fill(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                            float* panel) {
  const DF df;
  const DU du;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int j = 0; j < rows; ++j) {
    const int64_t r = n + j * row_step;
    const uint8_t* q = w.row_ptr(r);
    const uint8_t* scales = w.side_row(0, r);
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const uint8_t* p = q + kb * kBlock;
      hwy::Prefetch(p + kPrefetchBytes);
      float* out = panel + ((kb - kb0) * rows + j) * kBlock;
      const uint8_t s = scales[kb];
      if (s > 246 || HasNanCode(p)) {  // the tables' values (rare)
        w.format->dequantize_cols(w, r, kb * kBlock, (kb + 1) * kBlock, out);
        continue;
      }
      // 2^(s + 8 - 127): the exponent field s + 8, at least 8, so a normal number.
      const VF factor = hn::BitCast(df, hn::Set(du, uint32_t(s + 8) << 23));
      for (int64_t l0 = 0; l0 < kLanes; l0 += N) {
        hn::Store(hn::Mul(E4m3Scaled(p + l0), factor), df, out + l0);
        hn::Store(hn::Mul(E4m3Scaled(p + kLanes + l0), factor), df, out + kLanes + l0);
      }
    }
  }
}

}  // namespace

const BlockedPanelFills kBlockedPanelFills{&Mxfp8Fill, &AffineFill<4>, &AffineFill<8>};

}  // namespace HWY_NAMESPACE
}  // namespace matmul_detail
}  // namespace m3
#endif
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace m3::matmul_detail {

const BlockedPanelFills* simd_blocked_panel_fills(CpuPath path) {
  return M3_HWY_TABLE_OF(BlockedPanelFills, kBlockedPanelFills, path);
}

}  // namespace m3::matmul_detail
#endif
