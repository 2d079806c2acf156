// The blocked weight formats' panel fills and direct tiles (MXFP8, affine 4- and 8-bit) from one
// source for the Highway targets, as matmul_simd.cpp does for the dense formats' tiles: NEON and
// SVE, which had only the formats' scalar dequantize_cols, and AVX2, to measure this code against
// the hand-written AVX2 kernels on an x86 machine (docs/BENCHMARKS.md §0n, §0o). Each 32-block of a
// row is widened to fp32 in the lane order of matmul_tile.h (MXFP8 and 8-bit sequential, 4-bit in
// pairs), to the values of the format's scalar dequantize_cols, bit for bit:
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
#include <cstdlib>
#include <cstring>

#include "kernels/matmul_simd_tile-inl.h"  // Reduce16, the accumulator macros
#include "kernels/matmul_tile.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace matmul_detail {
namespace HWY_NAMESPACE {
namespace {

using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DI8 = hn::Rebind<int8_t, DF>;
using DI16 = hn::Rebind<int16_t, DF>;
using DF16 = hn::Rebind<hwy::float16_t, DF>;  // DF and VF: matmul_simd_tile-inl.h

constexpr int kPrefetchBytes = 512;  // each row is asked for this far ahead

#if HWY_TARGET == HWY_AVX2
constexpr CpuPath kPath = CpuPath::Avx2;
#elif HWY_TARGET == HWY_NEON
constexpr CpuPath kPath = CpuPath::Neon;
#elif HWY_TARGET == HWY_SVE
constexpr CpuPath kPath = CpuPath::Sve;
#else
#error "blocked matmul kernels for a target without a CpuPath"
#endif

// ---- widening: the codes of N lanes of one pass of a block ----

// Affine: `Bits`-bit values, element 0 in the lowest bits (a byte holds two 4-bit values), and a
// bf16 scale and bias per group of 1, 2 or 4 blocks. The codes of pass P, lanes lane0 .. lane0+N-1.
template <int Bits, int P>
HWY_INLINE hn::Vec<DI> AffineCodes(const uint8_t* block, int64_t lane0) {
  const DU du;
  if constexpr (Bits == 4) {  // the pair order: byte l's low nibble is pass 0, its high one pass 1
    const hn::Vec<DU> v = hn::PromoteTo(du, hn::LoadU(DU8(), block + lane0));
    return hn::BitCast(DI(), P == 0 ? hn::And(v, hn::Set(du, 0x0fu)) : hn::ShiftRight<4>(v));
  } else {  // the sequential order: bytes 0-15 are pass 0, 16-31 pass 1
    return hn::BitCast(DI(), hn::PromoteTo(du, hn::LoadU(DU8(), block + P * kLanes + lane0)));
  }
}

// MXFP8: N E4M3 bytes at p as the F16 bits of e4m3 x 2^-8 (exact; matmul_mxfp8.cpp). A NaN code
// (magnitude 0x7f) is the one whose bits plus kNanCarry carry into kNanBit.
constexpr int16_t kF16Bits = int16_t(0xbf80), kNanCarry = 0x0080, kNanBit = 0x4000;
HWY_INLINE hn::Vec<DI16> E4m3Bits(const uint8_t* p) {
  const DI16 di16;
  return hn::And(hn::ShiftLeft<7>(hn::PromoteTo(di16, hn::LoadU(DI8(), reinterpret_cast<const int8_t*>(p)))),
                 hn::Set(di16, kF16Bits));
}
HWY_INLINE VF E4m3Scaled(const uint8_t* p) { return hn::PromoteTo(DF(), hn::BitCast(DF16(), E4m3Bits(p))); }

// ---- panel fills ----

template <int Bits>
HWY_NOINLINE void AffineFill(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                             float* panel) {
  const DF df;
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
        hn::Store(hn::MulAdd(hn::ConvertTo(df, AffineCodes<Bits, 0>(p, l0)), scale, bias), df, out + l0);
        hn::Store(hn::MulAdd(hn::ConvertTo(df, AffineCodes<Bits, 1>(p, l0)), scale, bias), df, out + kLanes + l0);
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

// 2^(s + 8 - 127) for a UE8M0 scale s <= 246: the exponent field s + 8, at least 8, so a normal number.
HWY_INLINE float Mxfp8Factor(uint8_t s) {
  const uint32_t bits = uint32_t(s + 8) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

HWY_NOINLINE void Mxfp8Fill(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                            float* panel) {
  const DF df;
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
      const VF factor = hn::Set(df, Mxfp8Factor(s));
      for (int64_t l0 = 0; l0 < kLanes; l0 += N) {
        hn::Store(hn::Mul(E4m3Scaled(p + l0), factor), df, out + l0);
        hn::Store(hn::Mul(E4m3Scaled(p + kLanes + l0), factor), df, out + kLanes + l0);
      }
    }
  }
}

// ---- direct tiles (decode, small batches) ----
//
// As matmul_simd.cpp's dense direct tiles: a stretch of kStretchBlocks blocks at a time, the 16
// lanes of each output as 16/N chunks one after another (NEON: 4 chunks of 4), each weight widened
// in registers to the value its panel fill writes, so nothing is stored and read back through a
// panel. Each row's block factors (affine: scale and bias of the block's group; MXFP8: the
// block's power of two) are converted once per stretch into a small array the widening broadcasts
// from. MXFP8 blocks the widening cannot give exactly (a NaN code, a scale past 246) are only
// flagged as the tile runs; a flagged tile is computed again through the panel fill and the
// path's panel tiles, which give the same bits for every other block: real checkpoints have none.

constexpr int64_t kStretchBlocks = 32;  // rows x 32 blocks of weights stay in L1 for the later chunks
#if HWY_TARGET == HWY_AVX2
// The shapes of the AVX2 table the plan asks for (matmul_blocked_tile.h), within 16 registers.
constexpr int kTileMr = 3;
constexpr int kTileNr[5] = {0, 6, 3, 2, 0};
#else
constexpr int kTileMr = 4;  // 32 registers: accumulators, x of both passes, a row's factors and weights
constexpr int kTileNr[5] = {0, 6, 6, 6, 4};
#endif
constexpr int kTileMaxNr = 6;

// A tile's weight rows: the main tensor's and the side tensors' (scales, affine biases).
struct TileRows {
  const uint8_t* q[kTileMaxNr];
  const uint8_t* s0[kTileMaxNr];
  const uint8_t* s1[kTileMaxNr];
  TileRows(const LinearWeight& w, int64_t n, int64_t row_step, int nr) {
    const bool two = w.format->side.size() > 1;
    for (int j = 0; j < nr; ++j) {
      q[j] = w.row_ptr(n + j * row_step);
      s0[j] = w.side_row(0, n + j * row_step);
      s1[j] = two ? w.side_row(1, n + j * row_step) : nullptr;
    }
  }
};

// A format's part of a direct tile:
//   Factors: blocks kb0 .. kb0+nb-1 of row j into a[] (and b[]); false if one needs the panel path;
//   Widen<P>: pass P of lanes lane0 .. lane0+N-1 of a block, given its factors; may flag in `flags`
//     (any lane with kNanBit set sends the tile to the panel path).
template <int Bits>
struct AffineTile {
  static constexpr int64_t kBlockBytes = kBlock * Bits / 8;
  static constexpr PanelFill kFill = &AffineFill<Bits>;
  static bool Factors(const LinearWeight& w, const TileRows& r, int j, int64_t kb0, int nb, float* a, float* b) {
    const int shift = __builtin_ctzll(uint64_t(w.format->block_cols / kBlock));
    const uint16_t* scales = reinterpret_cast<const uint16_t*>(r.s0[j]);
    const uint16_t* biases = reinterpret_cast<const uint16_t*>(r.s1[j]);
    for (int i = 0; i < nb; ++i) {
      const int64_t g = (kb0 + i) >> shift;
      a[i] = bf16_to_f32(scales[g]);
      b[i] = bf16_to_f32(biases[g]);
    }
    return true;
  }
  template <int P>
  static HWY_INLINE VF Widen(const uint8_t* block, const float* a, const float* b, int64_t lane0, hn::Vec<DI16>&) {
    const DF df;
    return hn::MulAdd(hn::ConvertTo(df, AffineCodes<Bits, P>(block, lane0)), hn::Set(df, *a), hn::Set(df, *b));
  }
};

struct Mxfp8Tile {
  static constexpr int64_t kBlockBytes = kBlock;
  static constexpr PanelFill kFill = &Mxfp8Fill;
  static bool Factors(const LinearWeight&, const TileRows& r, int j, int64_t kb0, int nb, float* a, float*) {
    const uint8_t* s = r.s0[j] + kb0;
    uint8_t top = 0;
    for (int i = 0; i < nb; ++i) {
      top = s[i] > top ? s[i] : top;
      a[i] = Mxfp8Factor(s[i] <= 246 ? s[i] : 0);
    }
    return top <= 246;
  }
  template <int P>
  static HWY_INLINE VF Widen(const uint8_t* block, const float* a, const float*, int64_t lane0,
                             hn::Vec<DI16>& flags) {
    const hn::Vec<DI16> h = E4m3Bits(block + P * kLanes + lane0);
    flags = hn::Or(flags, hn::Add(h, hn::Set(DI16(), kNanCarry)));
    return hn::Mul(hn::PromoteTo(DF(), hn::BitCast(DF16(), h)), hn::Set(DF(), *a));
  }
};

// Both passes of a block into accumulator k (x row k % MR, weight row k / MR), the row's weights
// widened when its first accumulator comes up.
#define M3_BLOCK_FMA(k)                                                                                        \
  if constexpr (k < MR * NR) {                                                                                 \
    if constexpr (k % MR == 0) {                                                                               \
      w0 = WEIGHT(k / MR, 0);                                                                                  \
      w1 = WEIGHT(k / MR, 1);                                                                                  \
    }                                                                                                          \
    acc##k = hn::MulAdd(PickX<k % MR>(y0, y1, y2, y3), w1, hn::MulAdd(PickX<k % MR>(x0, x1, x2, x3), w0, acc##k)); \
  }

// y[m, j] for MR rows of packed x and NR weight rows n, n + row_step, ... over all of K; false
// (and nothing written) when a block needs the panel path.
template <class F, int MR, int NR>
HWY_NOINLINE bool DirectTile(const LinearWeight& lw, int64_t n, int64_t row_step, const TileArgs& a) {
  static_assert(MR <= 4 && MR * NR <= 24, "a tile has at most 4 x rows and 24 accumulators");
  const DF df;
  const DI16 di16;
  const int64_t N = int64_t(hn::Lanes(df));
  const TileRows rows(lw, n, row_step, NR);
  const int64_t KB = a.K / kBlock;  // blocked formats have whole blocks
  HWY_ALIGN float lanes[MR * NR * kLanes];
  HWY_ALIGN float fa[NR][kStretchBlocks];
  HWY_ALIGN float fb[NR][kStretchBlocks];
  hn::Vec<DI16> flags = hn::Zero(di16);
  const int64_t xs = a.x_stride;
  for (int64_t kb0 = 0; kb0 < KB; kb0 += kStretchBlocks) {
    const int64_t kb1 = kb0 + kStretchBlocks < KB ? kb0 + kStretchBlocks : KB;
    for (int j = 0; j < NR; ++j)
      if (!F::Factors(lw, rows, j, kb0, int(kb1 - kb0), fa[j], fb[j])) return false;
    for (int64_t lane0 = 0; lane0 < kLanes; lane0 += N) {
      M3_ACC24(M3_MM_DECL)
      if (kb0 > 0) { M3_ACC24(M3_MM_LOAD) }
      VF x0 = hn::Zero(df), x1 = x0, x2 = x0, x3 = x0, y0 = x0, y1 = x0, y2 = x0, y3 = x0, w0 = x0, w1 = x0;
      for (int64_t kb = kb0; kb < kb1; ++kb) {
        const int64_t i = kb - kb0;
        const float* xb = a.x + kb * a.x_block_stride + lane0;
        if (lane0 == 0)
          for (int j = 0; j < NR; ++j) hwy::Prefetch(rows.q[j] + kb * F::kBlockBytes + kPrefetchBytes);
        // x of both passes, then row after row both passes of its weights: a row's factors and
        // codes live only while its FMAs run.
        x0 = hn::LoadU(df, xb);
        y0 = hn::LoadU(df, xb + kLanes);
        if constexpr (MR > 1) x1 = hn::LoadU(df, xb + xs), y1 = hn::LoadU(df, xb + xs + kLanes);
        if constexpr (MR > 2) x2 = hn::LoadU(df, xb + 2 * xs), y2 = hn::LoadU(df, xb + 2 * xs + kLanes);
        if constexpr (MR > 3) x3 = hn::LoadU(df, xb + 3 * xs), y3 = hn::LoadU(df, xb + 3 * xs + kLanes);
#define WEIGHT(j, P) F::template Widen<P>(rows.q[j] + kb * F::kBlockBytes, &fa[j][i], &fb[j][i], lane0, flags)
        M3_ACC24(M3_BLOCK_FMA)
#undef WEIGHT
      }
      M3_ACC24(M3_MM_STORE)
    }
  }
  if (!hn::AllFalse(di16, hn::TestBit(flags, hn::Set(di16, kNanBit)))) return false;
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = Reduce16(lanes + (m * NR + j) * kLanes);
  return true;
}

// The same outputs through the format's panel fill and this path's panel tiles, a stretch of
// blocks at a time (the tables' values for the blocks the direct tile cannot widen).
void PanelPathTile(PanelFill fill, const LinearWeight& lw, int64_t n, int64_t row_step, int mr, int nr,
                   const TileArgs& a) {
  const TileKernels* k = simd_tile_kernels(kPath);
  if (k == nullptr || mr > k->panel_mr) std::abort();  // a build or planning bug
  HWY_ALIGN float panel[kTileMaxNr * kStretchBlocks * kBlock];
  HWY_ALIGN float lanes[4 * kTileMaxNr * kLanes];
  const int64_t KB = a.K / kBlock;
  for (int j0 = 0; j0 < nr; j0 += k->panel_nr) {
    const int nt = nr - j0 < k->panel_nr ? nr - j0 : k->panel_nr;
    for (int64_t kb0 = 0; kb0 < KB; kb0 += kStretchBlocks) {
      const int64_t kb1 = kb0 + kStretchBlocks < KB ? kb0 + kStretchBlocks : KB;
      fill(lw, n + j0 * row_step, row_step, nt, kb0, kb1, panel);
      PanelArgs p;
      p.x = a.x + kb0 * a.x_block_stride;
      p.x_stride = a.x_stride;
      p.x_block_stride = a.x_block_stride;
      p.panel = panel;
      p.blocks = kb1 - kb0;
      p.lanes = lanes;
      p.resume = kb0 > 0;
      if (kb1 == KB) {
        p.y = a.y + j0 * a.y_col_stride;
        p.y_stride = a.y_stride;
        p.y_col_stride = a.y_col_stride;
      }
      k->run_panel(mr, nt, p);
    }
  }
}

template <class F, int MR, int NR>
HWY_INLINE bool DirectNr(int nr, const LinearWeight& lw, int64_t n, int64_t row_step, const TileArgs& a) {
  if constexpr (NR >= 1) {
    if (nr == NR) return DirectTile<F, MR, NR>(lw, n, row_step, a);
    return DirectNr<F, MR, NR - 1>(nr, lw, n, row_step, a);
  } else {
    std::abort();  // unreachable: nr is checked below
  }
}

// BlockedTile: rows beyond the widest tile of this mr run as further tiles (each output's sum is
// its own, so this changes no bit).
template <class F>
void BlockedDirect(const LinearWeight& lw, int64_t n, int64_t row_step, int mr, int nr, const TileArgs& a) {
  if (mr < 1 || mr > kTileMr || nr < 1) std::abort();  // a planning bug
  for (int j0 = 0; j0 < nr; j0 += kTileNr[mr]) {
    const int nt = nr - j0 < kTileNr[mr] ? nr - j0 : kTileNr[mr];
    TileArgs t = a;
    t.y = a.y + j0 * a.y_col_stride;
    const int64_t first = n + j0 * row_step;
    bool done = false;
    switch (mr) {
      case 1: done = DirectNr<F, 1, kTileNr[1]>(nt, lw, first, row_step, t); break;
      case 2: done = DirectNr<F, 2, kTileNr[2]>(nt, lw, first, row_step, t); break;
      case 3: done = DirectNr<F, 3, kTileNr[3]>(nt, lw, first, row_step, t); break;
      default:
        if constexpr (kTileMr >= 4) done = DirectNr<F, 4, kTileNr[4]>(nt, lw, first, row_step, t);
    }
    if (!done) PanelPathTile(F::kFill, lw, first, row_step, mr, nt, t);
  }
}

}  // namespace

const BlockedSimdKernels kBlockedSimdKernels{&Mxfp8Fill,
                                             &AffineFill<4>,
                                             &AffineFill<8>,
                                             &BlockedDirect<Mxfp8Tile>,
                                             &BlockedDirect<AffineTile<4>>,
                                             &BlockedDirect<AffineTile<8>>};

}  // namespace HWY_NAMESPACE
}  // namespace matmul_detail
}  // namespace m3
#endif
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace m3::matmul_detail {

const BlockedSimdKernels* simd_blocked_kernels(CpuPath path) {
  return M3_HWY_TABLE_OF(BlockedSimdKernels, kBlockedSimdKernels, path);
}

}  // namespace m3::matmul_detail
#endif
