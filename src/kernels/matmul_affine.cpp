// The affine formats' panel fill and direct tiles on AVX2 and AVX-512 (mlx-lm's layout,
// format/weight_format.h): 4- or 8-bit unsigned values unpacked in registers in the lane order
// of matmul_tile.h (pairs for 4-bit, sequential for 8-bit), converted to fp32 and mapped through
// their group's scale and bias. scale x q is exact in fp32 (a bf16 scale has 8 significant bits, q at
// most 8), so the fused multiply-add here rounds exactly where the format's scalar
// dequantize_cols (multiply, then add) does: the same bits (checked in affine_format_test).
// A 32-column block lies within one group (groups are 32, 64 or 128 columns).
#include "kernels/matmul_tile.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>

#include "kernels/matmul_blocked_tile.h"

#define M3_AVX2 __attribute__((target("avx2,fma,f16c")))
#define M3_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace m3::matmul_detail {
namespace {

// Bytes ahead in each row of codes, and in each row of scales and of biases (asked for once per
// chunk of block factors). One-thread 4-bit decode streaming from DRAM on a Zen 5 guest, 512 bytes
// and no side prefetch against these: 0.76-1.07 ms against 0.65-0.88 ms at 6144 x 3072, faster in
// each of 4 alternated rounds (docs/BENCHMARKS.md §0o). The panel fills ask this far ahead; the
// direct tiles (decode) direct_tile_prefetch_bytes(), which is this on Zen 5 and 512 where the L1D
// is smaller.
constexpr int kPrefetchAhead = 1024;
constexpr int kSidePrefetchAhead = 128;
constexpr int kMaxPanelRows = 16;    // more than any path's panel_nr

struct RowPointers {
  const uint8_t* q[kMaxPanelRows];
  const uint16_t* scales[kMaxPanelRows];
  const uint16_t* biases[kMaxPanelRows];
  // The strides are found once: each lookup divides, which at 8 lookups per tile and K = 1024
  // took 5% of a 4-bit decode.
  RowPointers(const LinearWeight& w, int64_t n, int64_t row_step, int rows) {
    if (rows > kMaxPanelRows) std::abort();  // a planning bug
    const int64_t q_step = w.row_bytes() * row_step;
    const int64_t scale_step = w.side_row_bytes(0) / 2 * row_step, bias_step = w.side_row_bytes(1) / 2 * row_step;
    q[0] = w.row_ptr(n);
    scales[0] = reinterpret_cast<const uint16_t*>(w.side_row(0, n));
    biases[0] = reinterpret_cast<const uint16_t*>(w.side_row(1, n));
    for (int j = 1; j < rows; ++j) {
      q[j] = q[j - 1] + q_step;
      scales[j] = scales[j - 1] + scale_step;
      biases[j] = biases[j - 1] + bias_step;
    }
  }
};

// Block kb lies in group kb >> shift (groups are 1, 2 or 4 blocks): a shift, where a division per
// block and row measurably slowed decode.
inline int group_blocks_log2(const LinearWeight& w) { return __builtin_ctzll(uint64_t(w.format->block_cols / kBlock)); }

// An 8-bit block's values as 32-bit integers in the sequential lane order (matmul_tile.h): bytes
// 0-15 (pass 0) and 16-31 (pass 1) widened.
M3_AVX512 inline void bytes_to_ints512(const uint8_t* p, __m512i& p0, __m512i& p1) {
  p0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  p1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
}

M3_AVX2 inline __m256i widen8(const uint8_t* b) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
}

// A block's values as 32-bit integers in the lane order (matmul_tile.h), as four 8-lane quarters:
// lanes 0-7 and 8-15 of pass 0, then of pass 1. 8-bit: the sequential order. 4-bit: the pair
// order; byte i holds element 2i in its low nibble and 2i + 1 in its high one, so the low nibbles
// masked are pass 0 and the high ones shifted down pass 1.
template <int Bits>
M3_AVX2 inline void block_ints256(const uint8_t* p, __m256i (&v)[4]) {
  if constexpr (Bits == 8) {
    for (int q = 0; q < 4; ++q) v[q] = widen8(p + 8 * q);
  } else {
    const __m256i lo = widen8(p), hi = widen8(p + 8), mask = _mm256_set1_epi32(0x0f);
    v[0] = _mm256_and_si256(lo, mask);
    v[1] = _mm256_and_si256(hi, mask);
    v[2] = _mm256_srli_epi32(lo, 4);
    v[3] = _mm256_srli_epi32(hi, 4);
  }
}

// A 4-bit group's table: scale x q + bias for q = 0..15, from the fp32 scale and bias at s and b.
// A multiply and an add that broadcast their operands themselves (blocked::mul_broadcast512),
// where a multiply-add needs one of them broadcast into a register first, on the shuffle unit
// that the lookups keep busy (docs/BENCHMARKS.md §0zd). scale x q is exact, so the add rounds
// once, as the multiply-add did: the same table.
M3_AVX512 inline __m512 table512(const float* s, const float* b) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return blocked::add_broadcast512(blocked::mul_broadcast512(iota, s), b);
}

// The affine formats for the shared blocked loops of matmul_blocked_tile.h: the panel fills of both
// paths. The direct tiles are their own (direct512 and direct256, below).
template <int Bits>
struct AffinePolicy {
  static constexpr int kBlockBytes = kBlock * Bits / 8;
  struct Rows {
    RowPointers p;
    int shift;
    Rows(const LinearWeight& w, int64_t n, int64_t row_step, int nr)
        : p(w, n, row_step, nr), shift(group_blocks_log2(w)) {}
  };
  // One prefetch per 64-byte line (a line holds 64 / kBlockBytes blocks). Always inlined: GCC
  // found an out-of-line copy free of side effects (a prefetch is not one) and dropped every call,
  // so until 2026-12-05 the affine tiles ran without prefetching (docs/BENCHMARKS.md §0n).
  __attribute__((always_inline)) static void prefetch(const Rows& r, int j, int64_t kb) {
    if (kb % (64 / kBlockBytes) == 0)
      _mm_prefetch(reinterpret_cast<const char*>(r.p.q[j] + kb * kBlockBytes + kPrefetchAhead), _MM_HINT_T0);
  }
  // Each group's scale (a) and bias (b) as fp32, converted once per chunk: the AVX-512 fill puts
  // them in registers (group512) and the AVX2 widening broadcasts them from memory,
  // where converting them in the widening took a move from an integer register and a broadcast
  // shuffle per block and row (docs/BENCHMARKS.md §0i). Block kb of a chunk that starts at block
  // kb0 has entry group_in_chunk(r, kb, kb0).
  static int group_in_chunk(const Rows& r, int64_t kb, int64_t kb0) { return int((kb >> r.shift) - (kb0 >> r.shift)); }
  static void params(const Rows& r, int j, int64_t kb0, int nb, blocked::BlockParams& p) {
    const int64_t g0 = kb0 >> r.shift;
    const int groups = group_in_chunk(r, kb0 + nb - 1, kb0) + 1;
    _mm_prefetch(reinterpret_cast<const char*>(r.p.scales[j] + g0) + kSidePrefetchAhead, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(r.p.biases[j] + g0) + kSidePrefetchAhead, _MM_HINT_T0);
    for (int k = 0; k < groups; ++k) {
      p.a[k] = bf16_to_f32(r.p.scales[j][g0 + k]);
      p.b[k] = bf16_to_f32(r.p.biases[j][g0 + k]);
    }
  }
  // A group's scale and bias; for 4-bit, `table` holds the 16 values a weight can take, scale x q
  // + bias for q = 0..15, which one permutation per pass looks up: it reads only the low 4 bits of
  // each index lane, so the low nibbles need no mask, and the conversion and dequantizing
  // multiply-add per value become one table per group and row (docs/BENCHMARKS.md §0i).
  struct Group512 {
    __m512 scale, table;
    const float* bias;  // 8-bit: broadcast by the multiply-adds (blocked::fmadd_broadcast512)
  };
  M3_AVX512 static Group512 group512(const Rows& r, const blocked::BlockParams& p, int64_t kb, int i) {
    const int g = group_in_chunk(r, kb, kb - i);  // a panel's chunk may start inside a group
    Group512 v;
    if constexpr (Bits == 4) {
      v.table = table512(&p.a[g], &p.b[g]);
    } else {
      v.scale = _mm512_set1_ps(p.a[g]);
      v.bias = &p.b[g];
    }
    return v;
  }
  M3_AVX512 static void widen512(const Rows& r, int j, int64_t kb, const blocked::BlockParams&, const Group512& g, int,
                                 __m512& w0, __m512& w1) {
    const uint8_t* q = r.p.q[j] + kb * kBlockBytes;
    if constexpr (Bits == 4) {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      w0 = _mm512_permutexvar_ps(v, g.table);
      w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), g.table);
    } else {
      __m512i q0, q1;
      bytes_to_ints512(q, q0, q1);
      w0 = blocked::fmadd_broadcast512(_mm512_cvtepi32_ps(q0), g.scale, g.bias);
      w1 = blocked::fmadd_broadcast512(_mm512_cvtepi32_ps(q1), g.scale, g.bias);
    }
  }
  M3_AVX2 static void widen256(const Rows& r, int j, int64_t kb, const blocked::BlockParams& p, int i,
                               __m256 (&v)[4]) {
    const int g = group_in_chunk(r, kb, kb - i);
    const __m256 s = _mm256_set1_ps(p.a[g]), b = _mm256_set1_ps(p.b[g]);
    __m256i q[4];
    block_ints256<Bits>(r.p.q[j] + kb * kBlockBytes, q);
    for (int k = 0; k < 4; ++k) v[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[k]), s, b);
  }
};

// The AVX-512 direct tiles (decode), written for the affine formats alone: a plain loop over the
// groups of K, each group's blocks unrolled (GB = 1, 2 or 4 blocks to a group), each row's scale
// and bias converted 32 groups at a time. The shared blocked loop (matmul_blocked_tile.h, which
// MXFP8 keeps) spent a quarter of a 4-bit decode between its groups: 0.96-1.0 ns per 32 weights
// and row against 0.74 here (docs/BENCHMARKS.md §0p). The arithmetic is AffinePolicy's
// widen512 (the same table and multiply-adds in the same order), so the bits are the panel path's.
constexpr int kChunkGroups = 32;  // a 64-byte line of bf16 scales (and of biases) per row

// n (<= 32) bf16 values as fp32.
M3_AVX512 inline void side_to_f32(const uint16_t* src, int n, float* dst) {
  const __mmask32 all = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(__mmask16(all), src));
  const __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(__mmask16(all >> 16), src + 16));
  _mm512_store_ps(dst, _mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)));
  _mm512_store_ps(dst + 16, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
}

template <int Bits, int MR, int NR, int GB>
M3_AVX512 void direct512(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  constexpr int kBlockBytes = kBlock * Bits / 8;
  constexpr int kLineBlocks = 64 / kBlockBytes;  // blocks per 64-byte line of codes
  const RowPointers r(w, n, row_step, NR);
  const int64_t ahead = direct_tile_prefetch_bytes();
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j] = _mm512_setzero_ps();
  const int64_t groups = a.K / (kBlock * GB);
  alignas(64) float scale[NR][kChunkGroups], bias[NR][kChunkGroups];
  for (int64_t g0 = 0; g0 < groups; g0 += kChunkGroups) {
    const int ng = int(std::min<int64_t>(kChunkGroups, groups - g0));
    for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(r.scales[j] + g0) + kSidePrefetchAhead, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r.biases[j] + g0) + kSidePrefetchAhead, _MM_HINT_T0);
      side_to_f32(r.scales[j] + g0, ng, scale[j]);
      side_to_f32(r.biases[j] + g0, ng, bias[j]);
    }
    for (int g = 0; g < ng; ++g) {
      __m512 s[NR];  // 4-bit: the group's table (scale x q + bias, q = 0..15); 8-bit: its scale
      for (int j = 0; j < NR; ++j) {
        if constexpr (Bits == 4) {
          s[j] = table512(&scale[j][g], &bias[j][g]);
        } else {  // the bias is broadcast by the multiply-adds (blocked::fmadd_broadcast512)
          s[j] = _mm512_set1_ps(scale[j][g]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < GB; ++i) {
        const int64_t kb = (g0 + g) * GB + i;
        __m512 x0[MR], x1[MR];
        blocked::load_x512<MR>(a, kb, x0, x1);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
          const uint8_t* q = r.q[j] + kb * kBlockBytes;
          if ((kb & (kLineBlocks - 1)) == 0) _mm_prefetch(reinterpret_cast<const char*>(q + ahead), _MM_HINT_T0);
          __m512 w0, w1;
          if constexpr (Bits == 4) {
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
            w0 = _mm512_permutexvar_ps(v, s[j]);
            w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), s[j]);
          } else {
            __m512i q0, q1;
            bytes_to_ints512(q, q0, q1);
            w0 = blocked::fmadd_broadcast512(_mm512_cvtepi32_ps(q0), s[j], &bias[j][g]);
            w1 = blocked::fmadd_broadcast512(_mm512_cvtepi32_ps(q1), s[j], &bias[j][g]);
          }
#pragma GCC unroll 4
          for (int m = 0; m < MR; ++m) acc[m][j] = _mm512_fmadd_ps(x1[m], w1, _mm512_fmadd_ps(x0[m], w0, acc[m][j]));
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j]);
}

// n (<= 32) bf16 values as fp32, on AVX2.
M3_AVX2 inline void side_to_f32_256(const uint16_t* src, int n, float* dst) {
  alignas(32) uint16_t tail[kChunkGroups] = {};
  if (n < kChunkGroups) {  // the row's last chunk: a full load could leave the tensor
    for (int i = 0; i < n; ++i) tail[i] = src[i];
    src = tail;
  }
  for (int q = 0; q < kChunkGroups / 8; ++q) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8 * q)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 8 * q), _mm256_slli_epi32(v, 16));
  }
}

// The AVX2 direct tiles, the same loop as direct512: AffinePolicy's widen256 and tile256_checked's
// multiply-adds in the same order, so the same bits. A group's blocks run row by row, so that its
// scale and bias are broadcast once per group and row (16 registers cannot hold every row's): a
// broadcast takes the shuffle unit that the widening needs too (4-bit decode 1.79 -> 1.71 ns per
// 32 weights on Zen 4, docs/BENCHMARKS.md §0zd).
template <int Bits, int MR, int NR, int GB>
M3_AVX2 void direct256(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  constexpr int kBlockBytes = kBlock * Bits / 8;
  constexpr int kLineBlocks = 64 / kBlockBytes;
  const RowPointers r(w, n, row_step, NR);
  const int64_t ahead = direct_tile_prefetch_bytes();
  __m256 acc[MR][NR][2];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j][0] = acc[m][j][1] = _mm256_setzero_ps();
  const int64_t groups = a.K / (kBlock * GB);
  alignas(32) float scale[NR][kChunkGroups], bias[NR][kChunkGroups];
  for (int64_t g0 = 0; g0 < groups; g0 += kChunkGroups) {
    const int ng = int(std::min<int64_t>(kChunkGroups, groups - g0));
    for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(r.scales[j] + g0) + kSidePrefetchAhead, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r.biases[j] + g0) + kSidePrefetchAhead, _MM_HINT_T0);
      side_to_f32_256(r.scales[j] + g0, ng, scale[j]);
      side_to_f32_256(r.biases[j] + g0, ng, bias[j]);
    }
    for (int g = 0; g < ng; ++g) {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        const __m256 sv = _mm256_broadcast_ss(&scale[j][g]), bv = _mm256_broadcast_ss(&bias[j][g]);
#pragma GCC unroll 4
        for (int i = 0; i < GB; ++i) {
          const int64_t kb = (g0 + g) * GB + i;
          const float* x = a.x + kb * a.x_block_stride;
          const uint8_t* q = r.q[j] + kb * kBlockBytes;
          if ((kb & (kLineBlocks - 1)) == 0) _mm_prefetch(reinterpret_cast<const char*>(q + ahead), _MM_HINT_T0);
          __m256i qi[4];
          block_ints256<Bits>(q, qi);
          __m256 v[4];
          for (int k = 0; k < 4; ++k) v[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(qi[k]), sv, bv);
#pragma GCC unroll 4
          for (int m = 0; m < MR; ++m) {
            const float* xm = x + m * a.x_stride;
            acc[m][j][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xm + 16), v[2],
                                           _mm256_fmadd_ps(_mm256_loadu_ps(xm), v[0], acc[m][j][0]));
            acc[m][j][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xm + 24), v[3],
                                           _mm256_fmadd_ps(_mm256_loadu_ps(xm + 8), v[1], acc[m][j][1]));
          }
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j][0], acc[m][j][1]);
}

// The shapes the planner asks for (matmul_blocked_tile.h: mr <= 4, nr <= 6), for each group size.
constexpr int kDirectMaxMr = 4, kDirectMaxNr = 6;
using DirectFn = void (*)(const LinearWeight&, int64_t, int64_t, const TileArgs&);
using DirectTable = std::array<std::array<DirectFn, kDirectMaxNr + 1>, kDirectMaxMr + 1>;

template <bool Avx512, int Bits, int GB, int MR, int... I>
constexpr std::array<DirectFn, kDirectMaxNr + 1> direct_row(std::integer_sequence<int, I...>) {
  std::array<DirectFn, kDirectMaxNr + 1> row{};
  if constexpr (Avx512) ((row[I + 1] = &direct512<Bits, MR, I + 1, GB>), ...);
  else ((row[I + 1] = &direct256<Bits, MR, I + 1, GB>), ...);
  return row;
}
// AVX-512: mr <= 4 with nr <= 6; AVX2: mr <= 3 with nr <= 6, 3, 2 (its planner's shapes).
template <bool Avx512, int Bits, int GB>
constexpr DirectTable direct_table() {
  using Row = std::array<DirectFn, kDirectMaxNr + 1>;
  if constexpr (Avx512) {
    constexpr auto nrs = std::make_integer_sequence<int, kDirectMaxNr>{};
    return {Row{}, direct_row<true, Bits, GB, 1>(nrs), direct_row<true, Bits, GB, 2>(nrs),
            direct_row<true, Bits, GB, 3>(nrs), direct_row<true, Bits, GB, 4>(nrs)};
  } else {
    return {Row{}, direct_row<false, Bits, GB, 1>(std::make_integer_sequence<int, 6>{}),
            direct_row<false, Bits, GB, 2>(std::make_integer_sequence<int, 3>{}),
            direct_row<false, Bits, GB, 3>(std::make_integer_sequence<int, 2>{}), Row{}};
  }
}

template <bool Avx512, int Bits>
void direct_run(const LinearWeight& w, int64_t n, int64_t row_step, int mr, int nr, const TileArgs& a) {
  static constexpr DirectTable kTables[3] = {direct_table<Avx512, Bits, 1>(), direct_table<Avx512, Bits, 2>(),
                                             direct_table<Avx512, Bits, 4>()};
  const int gb_log2 = group_blocks_log2(w);
  if (gb_log2 > 2 || mr < 1 || mr > kDirectMaxMr || nr < 1 || nr > kDirectMaxNr) std::abort();  // a planning bug
  const DirectFn f = kTables[gb_log2][size_t(mr)][size_t(nr)];
  if (f == nullptr) std::abort();  // a planning bug
  f(w, n, row_step, a);
}

}  // namespace

BlockedTile affine_direct_tile(CpuPath path, int bits) {
  if (bits != 4 && bits != 8) return nullptr;
  switch (path) {
    case CpuPath::Avx2: return bits == 4 ? &direct_run<false, 4> : &direct_run<false, 8>;
    case CpuPath::Avx512: return bits == 4 ? &direct_run<true, 4> : &direct_run<true, 8>;
    default: return nullptr;
  }
}

PanelFill affine_panel_fill(CpuPath path, int bits) {
  if (bits != 4 && bits != 8) return nullptr;
  switch (path) {
    case CpuPath::Avx2: return bits == 4 ? &blocked::fill256<AffinePolicy<4>> : &blocked::fill256<AffinePolicy<8>>;
    case CpuPath::Avx512: return bits == 4 ? &blocked::fill512<AffinePolicy<4>> : &blocked::fill512<AffinePolicy<8>>;
    default: return nullptr;
  }
}

}  // namespace m3::matmul_detail

#else

namespace m3::matmul_detail {
// Other architectures (NEON, SVE): the Highway fills and direct tiles.
PanelFill affine_panel_fill(CpuPath path, int bits) {
  const BlockedSimdKernels* f = simd_blocked_kernels(path);
  if (f == nullptr || (bits != 4 && bits != 8)) return nullptr;
  return bits == 4 ? f->affine4 : f->affine8;
}
BlockedTile affine_direct_tile(CpuPath path, int bits) {
  const BlockedSimdKernels* f = simd_blocked_kernels(path);
  if (f == nullptr || (bits != 4 && bits != 8)) return nullptr;
  return bits == 4 ? f->affine4_tile : f->affine8_tile;
}
}  // namespace m3::matmul_detail

#endif
