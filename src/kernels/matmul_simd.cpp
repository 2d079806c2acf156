// The matmul tile kernels (kernels/matmul_tile.h) from one source for every SIMD target (Google
// Highway), as attention_kernels_simd.cpp does: foreach_target.h compiles this file once per
// target, each copy in its own namespace (N_AVX2, N_NEON, N_SVE), and the HWY_ONCE part
// hands out the TileKernels tables. Nothing here instantiates a std:: template.
//
// The lane order is matmul_tile.h's: each output owns 16 fp32 lanes, lane l adds pass 0 then
// pass 1 of every 32-block, blocks in order, one fused multiply-add each, and the 16 lanes are
// summed by the fixed tree at the end. A vector holds N of those lanes (4 on NEON and 128-bit SVE,
// 8 on AVX2 and 256-bit SVE, 16 on 512-bit and wider SVE). Lanes never mix, so a tile may run the
// 16 lanes as 16/N chunks one after another over a stretch of K without changing any lane's chain:
// a chunk needs only one vector per output, and the tile can be as wide as the accumulators the
// registers hold (AVX2: 3 x 4 outputs, 12 of its 16 registers; NEON and SVE: 4 x 6 of 32).
// The results are the bits of the hand-written AVX2/AVX-512 tiles and of every other target.
//
// Compiled with -ffp-contract=off (CMakeLists.txt): the only fused multiply-adds are the explicit
// MulAdd calls, and the final 16-lane sum is plain adds on every target.
//
// The targets compiled: AVX2 (its panel tiles run; matmul.cpp), NEON and SVE. AVX-512 keeps the
// hand-written tiles (matmul_avx512.cpp), which measured faster at small K.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3 | HWY_AVX3_DL | HWY_SVE2 | HWY_SVE2_128 | HWY_SVE_256)
#endif
#include "base/simd_targets.h"  // M3_HWY_TABLE_OF
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/matmul_simd_tile-inl.h"  // Reduce16, the accumulator macros
#include "kernels/matmul_tile.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace matmul_detail {
namespace HWY_NAMESPACE {
namespace {

using DU = hn::RebindToUnsigned<DF>;  // DF and VF: matmul_simd_tile-inl.h
using DF16 = hn::Rebind<hwy::float16_t, DF>;

#if HWY_TARGET == HWY_AVX2
constexpr const char* kName = "avx2";
// 16 registers: mr x nr accumulators, mr x vectors and the widened weight vector. The direct
// tiles' shapes are those of the blocked formats' AVX2 direct tiles (matmul_blocked_tile.h), which
// run on the same plan and hold all 16 lanes of an output in two registers.
constexpr int kMaxMr = 3;
constexpr int kNr[5] = {0, 6, 3, 2, 0};
constexpr int kPanelMr = 3, kPanelNr = 4;
#else
#if HWY_TARGET == HWY_NEON
constexpr const char* kName = "neon";
#elif HWY_TARGET == HWY_SVE
constexpr const char* kName = "sve";
#else
#error "matmul tiles for a target without a CpuPath"
#endif
// 32 registers: up to 24 accumulators.
constexpr int kMaxMr = 4;
constexpr int kNr[5] = {0, 8, 8, 8, 6};
constexpr int kPanelMr = 4, kPanelNr = 6;
#endif

// K blocks a tile runs per chunk of lanes before the next chunk: the tile's weight rows and x
// rows of that stretch (nr x 2 KiB of bf16 and mr x 4 KiB of x) stay in L1 for the later chunks.
constexpr int64_t kChunkBlocks = 32;
// Direct tiles and widen_rows stream weights from memory: they ask for them this far ahead.
constexpr int kPrefetchBytes = 1024;

// Pass P of the N lanes from c·N of one 32-element block at p, widened exactly to fp32 (the lane
// order of matmul_tile.h: BF16 pairs split into even and odd elements, F16/F32 halves).
template <DType T, int P>
HWY_INLINE VF Widen(DF df, const uint8_t* p, int64_t lane0) {
  if constexpr (T == DType::F32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(p) + P * kLanes + lane0);
  } else if constexpr (T == DType::F16) {
    return hn::PromoteTo(df, hn::LoadU(DF16(), reinterpret_cast<const hwy::float16_t*>(p) + P * kLanes + lane0));
  } else {
    const DU du;
    const auto pairs = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p) + lane0);
    if constexpr (P == 0) return hn::BitCast(df, hn::ShiftLeft<16>(pairs));
    else return hn::BitCast(df, hn::And(pairs, hn::Set(du, 0xffff0000u)));
  }
}

template <DType T>
constexpr int kBlockBytes = T == DType::F32 ? 128 : 64;

// A direct tile (decode, small batches): y[m, j] for MR rows of packed x and NR weight rows, over
// all of K, widening each weight in registers as it streams by.
template <DType T, int MR, int NR>
HWY_NOINLINE void Tile(const TileArgs& a) {
  static_assert(MR <= 4 && MR * NR <= 24, "a tile has at most 4 x rows and 24 accumulators");
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int64_t kBytes = kBlockBytes<T>;
  const int64_t full = a.K / kBlock, KB = (a.K + kBlock - 1) / kBlock;
  // A partial last block is copied, zero-padded, so that no load leaves a row.
  HWY_ALIGN uint8_t tail[NR][kBytes];
  if (full < KB) {
    for (int j = 0; j < NR; ++j) {
      const int64_t bytes = (a.K - full * kBlock) * int64_t(dtype_size(T));
      const uint8_t* src = a.w + j * a.w_stride + full * kBytes;
      for (int64_t i = 0; i < kBytes; ++i) tail[j][i] = i < bytes ? src[i] : 0;
    }
  }
  HWY_ALIGN float lanes[MR * NR * kLanes];
  const int64_t xs = a.x_stride;
  // One vector per output holds all 16 lanes on 16-lane targets: K in one stretch.
  const int64_t stretch = N >= kLanes ? KB : kChunkBlocks;
  for (int64_t kb0 = 0; kb0 < KB; kb0 += stretch) {
    const int64_t kb1 = kb0 + stretch < KB ? kb0 + stretch : KB;
    for (int64_t lane0 = 0; lane0 < kLanes; lane0 += N) {
      M3_ACC24(M3_MM_DECL)
      if (kb0 > 0) { M3_ACC24(M3_MM_LOAD) }
      VF x0 = hn::Zero(df), x1 = x0, x2 = x0, x3 = x0, w = x0;
      for (int64_t kb = kb0; kb < kb1; ++kb) {
        const float* xb = a.x + kb * a.x_block_stride + lane0;
        const bool in_tail = kb >= full;
        const uint8_t* wb = in_tail ? &tail[0][0] : a.w + kb * kBytes;
        const int64_t ws = in_tail ? kBytes : a.w_stride;
        if (lane0 == 0)
          for (int j = 0; j < NR; ++j) hwy::Prefetch(wb + j * ws + kPrefetchBytes);
#define WEIGHT(j) Widen<T, kPass>(df, wb + (j) * ws, lane0)
        M3_MM_PASS(0)
        M3_MM_PASS(1)
#undef WEIGHT
      }
      M3_ACC24(M3_MM_STORE)
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = Reduce16(lanes + (m * NR + j) * kLanes);
}

// AVX2's 8-lane vectors: an output's 16 lanes are two vectors, lanes 0-7 (stored by the first
// chunk) and 8-15 (the second chunk's, in a register). The fixed 16-lane sum of matmul_tile.h from
// there, with the additions of Reduce16: s8 = lanes 0-7 + lanes 8-15, s4 = its halves added;
// Totals4 then gives four outputs' (s4[0] + s4[2]) + (s4[1] + s4[3]) in one vector. (NEON's
// 4-lane chunks and SVE's scalable vectors, which cannot live in arrays, keep Reduce16.)
#if HWY_TARGET == HWY_AVX2
using D4 = hn::FixedTag<float, 4>;

HWY_INLINE hn::Vec<D4> SumHalves(VF lanes8_15, const float* lanes0_7) {
  const DF df;
  const hn::Half<DF> dh;
  const VF s8 = hn::Add(hn::LoadU(df, lanes0_7), lanes8_15);
  return hn::Add(hn::LowerHalf(dh, s8), hn::UpperHalf(dh, s8));
}

HWY_INLINE hn::Vec<D4> Totals4(hn::Vec<D4> a, hn::Vec<D4> b, hn::Vec<D4> c, hn::Vec<D4> d) {
  const D4 d4;
  // (a0 + a2, b0 + b2, a1 + a3, b1 + b3), and the same of c and d
  const auto ab = hn::Add(hn::InterleaveLower(d4, a, b), hn::InterleaveUpper(d4, a, b));
  const auto cd = hn::Add(hn::InterleaveLower(d4, c, d), hn::InterleaveUpper(d4, c, d));
  return hn::Add(hn::ConcatLowerLower(d4, cd, ab), hn::ConcatUpperUpper(d4, cd, ab));
}
#endif

// A panel tile (prefill): the weights of blocks [0, blocks) come widened in an fp32 panel
// (PanelArgs); the lanes resume from and return to a.lanes between chunks of K.
template <int MR, int NR>
HWY_NOINLINE void PanelTile(const PanelArgs& a) {
  static_assert(MR <= 4 && MR * NR <= 24, "a tile has at most 4 x rows and 24 accumulators");
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  // The packed x of the tile (matmul.cpp's run_range): block b's row m at x + (b·MR + m)·32.
  if (a.x_stride != kBlock || a.x_block_stride != MR * kBlock) std::abort();  // a planning bug
  constexpr int64_t xs = kBlock;
  // AVX2 and a tile of 4 weight rows: the sums of the last chunk's outputs start in registers
  // (SumHalves, Totals4), where storing them and summing each output's 16 lanes from memory was a
  // fifth of the tile's time at K = 512 (docs/BENCHMARKS.md §0za).
#if HWY_TARGET == HWY_AVX2
  constexpr bool kSumInRegisters = NR == 4;
#endif
  HWY_ALIGN float out_lanes[MR * NR * kLanes];
  float* lanes = a.lanes;
  for (int64_t lane0 = 0; lane0 < kLanes; lane0 += N) {
    M3_ACC24(M3_MM_DECL)
    if (a.resume) { M3_ACC24(M3_MM_LOAD) }
    VF x0 = hn::Zero(df), x1 = x0, x2 = x0, x3 = x0, w = x0;
    // Pointers that step block by block, every other offset a constant: GCC kept the strides and
    // the block index on the stack and reloaded them every pass (docs/BENCHMARKS.md §0za).
    const float* xb = a.x + lane0;
    const float* pb = a.panel + lane0;
    const uint8_t* next = lane0 == 0 ? a.prefetch : nullptr;
    for (const float* const end = pb + a.blocks * NR * kBlock; pb != end; xb += MR * kBlock, pb += NR * kBlock) {
      if (next != nullptr) {
        for (int j = 0; j < NR; ++j)
          for (int off = 0; off < a.prefetch_block_bytes; off += 64)
            __builtin_prefetch(next + j * a.prefetch_stride + off, 0, 2);
        next += a.prefetch_block_bytes;
      }
#define WEIGHT(j) hn::Load(df, pb + (j) * kBlock + kPass * kLanes)
      M3_MM_PASS(0)
      M3_MM_PASS(1)
#undef WEIGHT
    }
#if HWY_TARGET == HWY_AVX2
    if constexpr (kSumInRegisters) {
      if (a.y != nullptr && lane0 + N == kLanes) {  // the last chunk: lanes 0-7 wait in out_lanes
        hn::Vec<D4> s4[MR * NR];
#define M3_MM_S4(k) \
  if constexpr (k < MR * NR) s4[k] = SumHalves(acc##k, out_lanes + ((k % MR) * NR + k / MR) * kLanes);
        M3_ACC24(M3_MM_S4)
#undef M3_MM_S4
        for (int m = 0; m < MR; ++m) {  // outputs (m, 0..3): accumulators m, m + MR, m + 2MR, m + 3MR
          const hn::Vec<D4> t = Totals4(s4[m], s4[m + MR], s4[m + 2 * MR], s4[m + 3 * MR]);
          float* y = a.y + m * a.y_stride;
          if (a.y_col_stride == 1) {
            hn::StoreU(t, D4(), y);
          } else {
            HWY_ALIGN float four[4];
            hn::Store(t, D4(), four);
            for (int j = 0; j < 4; ++j) y[j * a.y_col_stride] = four[j];
          }
        }
        return;
      }
    }
#endif
    if (a.y != nullptr) lanes = out_lanes;
    M3_ACC24(M3_MM_STORE)
    lanes = a.lanes;
  }
  if (a.y != nullptr)
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < NR; ++j)
        a.y[m * a.y_stride + j * a.y_col_stride] = Reduce16(out_lanes + (m * NR + j) * kLanes);
}

// Blocks [kb0, kb1) of `rows` weight rows into the panel layout of PanelArgs (nr = rows).
template <DType T>
HWY_NOINLINE void WidenRowsT(const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0, int64_t kb1,
                             float* panel) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int64_t kBytes = kBlockBytes<T>;
  const int64_t full = K / kBlock;
  float* out = panel;
  for (int64_t kb = kb0; kb < kb1; ++kb)
    for (int j = 0; j < rows; ++j, out += kBlock) {
      const uint8_t* src = w + j * row_bytes + kb * kBytes;
      HWY_ALIGN uint8_t tail[kBytes];
      if (kb >= full) {  // the partial last block, zero-padded
        const int64_t bytes = (K - full * kBlock) * int64_t(dtype_size(T));
        for (int64_t i = 0; i < kBytes; ++i) tail[i] = i < bytes ? src[i] : 0;
        src = tail;
      } else {
        hwy::Prefetch(src + kPrefetchBytes);
      }
      for (int64_t lane0 = 0; lane0 < kLanes; lane0 += N) {
        hn::Store(Widen<T, 0>(df, src, lane0), df, out + lane0);
        hn::Store(Widen<T, 1>(df, src, lane0), df, out + kLanes + lane0);
      }
    }
}

void WidenRows(DType dtype, const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0, int64_t kb1,
               float* panel) {
  if (dtype == DType::BF16) WidenRowsT<DType::BF16>(w, row_bytes, rows, K, kb0, kb1, panel);
  else if (dtype == DType::F16) WidenRowsT<DType::F16>(w, row_bytes, rows, K, kb0, kb1, panel);
  else WidenRowsT<DType::F32>(w, row_bytes, rows, K, kb0, kb1, panel);
}

// Dispatch over the shapes the planner asks for (mr <= kMaxMr, nr <= kNr[mr]). Plain switches:
// the function-pointer tables would be std::array instantiations.
template <DType T, int MR, int NR>
HWY_INLINE void RunNr(int nr, const TileArgs& a) {
  if constexpr (NR >= 1) {
    if (nr == NR) return Tile<T, MR, NR>(a);
    RunNr<T, MR, NR - 1>(nr, a);
  } else {
    std::abort();  // a planning bug, not bad input
  }
}

template <DType T>
HWY_INLINE void RunMr(int mr, int nr, const TileArgs& a) {
  if (nr < 1 || mr < 1 || mr > kMaxMr || nr > kNr[mr]) std::abort();  // a planning bug
  switch (mr) {
    case 1: return RunNr<T, 1, kNr[1]>(nr, a);
    case 2: return RunNr<T, 2, kNr[2]>(nr, a);
    case 3: return RunNr<T, 3, kNr[3]>(nr, a);
    default:
      if constexpr (kMaxMr >= 4) return RunNr<T, 4, kNr[4]>(nr, a);
      std::abort();
  }
}

void Run(DType dtype, int mr, int nr, const TileArgs& a) {
  if (dtype == DType::BF16) RunMr<DType::BF16>(mr, nr, a);
  else if (dtype == DType::F16) RunMr<DType::F16>(mr, nr, a);
  else RunMr<DType::F32>(mr, nr, a);
}

template <int MR, int NR>
HWY_INLINE void PanelNr(int nr, const PanelArgs& a) {
  if constexpr (NR >= 1) {
    if (nr == NR) return PanelTile<MR, NR>(a);
    PanelNr<MR, NR - 1>(nr, a);
  } else {
    std::abort();  // a planning bug
  }
}

void RunPanel(int mr, int nr, const PanelArgs& a) {
  if (mr < 1 || mr > kPanelMr || nr < 1 || nr > kPanelNr) std::abort();  // a planning bug
  switch (mr) {
    case 1: return PanelNr<1, kPanelNr>(nr, a);
    case 2: return PanelNr<2, kPanelNr>(nr, a);
    case 3: return PanelNr<3, kPanelNr>(nr, a);
    default:
      if constexpr (kPanelMr >= 4) return PanelNr<4, kPanelNr>(nr, a);
      std::abort();
  }
}

}  // namespace

const TileKernels kTileKernels{kName, kMaxMr, {kNr[0], kNr[1], kNr[2], kNr[3], kNr[4]}, &Run, kPanelMr, kPanelNr,
                               &RunPanel, &WidenRows};

}  // namespace HWY_NAMESPACE
}  // namespace matmul_detail
}  // namespace m3
#endif
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace m3::matmul_detail {

const TileKernels* simd_tile_kernels(CpuPath path) {
  return M3_HWY_TABLE_OF(TileKernels, kTileKernels, path);
}

}  // namespace m3::matmul_detail
#endif
