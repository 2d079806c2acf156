#pragma once
// The shared loops of the blocked weight formats (MXFP8, affine) on AVX-512 and AVX2: the panel
// fills (prefill) and MXFP8's checked direct tiles. The format supplies the widening (a Policy,
// below). The arithmetic is the lane order of matmul_tile.h (per lane: pass 0, then pass 1, block
// after block; the fixed 16-lane sum), with the exact dequantized values, so a row's result has the
// panel path's bits and never depends on M.
//
// Decode runs each format's own direct tiles (matmul_mxfp8.cpp, matmul_affine.cpp: plain loops,
// docs/BENCHMARKS.md §0p and §0q). An MXFP8 direct tile that meets a NaN code or a scale its
// single factor cannot hold runs again through the checked tiles here, which take the tables for
// a block with a NaN code and two multiplies for a huge scale.
//
// A format turns each row's per-block (MXFP8) or per-group (affine) factors into fp32 once per
// chunk of kParamBlocks blocks (Policy::params), into a small array the widening broadcasts from
// memory: converting them in the inner loop cost a scalar-to-vector move and a broadcast shuffle
// per block and row (docs/BENCHMARKS.md §0h, §0i). The AVX-512 loops go group by group: a row's
// factors for a group of blocks (affine: 1, 2 or 4 blocks share a scale and a bias; MXFP8: each
// block has its own) are put in registers once per group (Policy::group512).
//
// A Policy provides:
//   struct Rows { Rows(const LinearWeight& w, int64_t n, int64_t row_step, int nr); };  // nr <= 16 (a panel)
//   static void params(const Rows&, int j, int64_t kb0, int nb, BlockParams&);  // blocks kb0 .. kb0+nb-1 of row j
//   static int blocks_per_group_log2(const Rows&);  // the checked tiles' chunks hold whole groups
//                                                    // (only MXFP8, whose groups are single blocks)
//   struct Group512;  // a row's factors for one group, in registers
//   static Group512 group512(const Rows&, const BlockParams&, int64_t kb, int i);  // block kb's group;
//                                                                                   // i = kb - kb0
//   static void widen512(const Rows&, int j, int64_t kb, const BlockParams&, const Group512&, int i,
//                        __m512& pass0, __m512& pass1);  // the block's exact values
//   static void widen256(const Rows&, int j, int64_t kb, const BlockParams&, int i, __m256 (&v)[4]);
//       // AVX2: lanes 0-7, 8-15 of pass 0, then of pass 1. i = kb - kb0.
//   static void prefetch(const Rows&, int j, int64_t kb);
// Included only by the format files, which are compiled for plain x86-64 with per-function targets.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>

#include "kernels/matmul_reduce.h"
#include "kernels/matmul_tile.h"

#define M3_BLOCKED_AVX2 __attribute__((target("avx2,fma,f16c")))
#define M3_BLOCKED_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace m3::matmul_detail::blocked {

constexpr int kParamBlocks = 16;  // blocks whose factors are converted at once

// A row's factors for blocks kb0 .. kb0 + nb - 1 (or their groups), as the format's widening uses them.
struct BlockParams {
  alignas(64) float a[kParamBlocks];
  alignas(64) float b[kParamBlocks];
  bool rare = false;  // a block needs the format's rare-case arithmetic (MXFP8: a scale past 2^119)
};

// v times, or plus, the fp32 at f, which the instruction broadcasts itself (an embedded
// broadcast). Written out because the compiler broadcasts a value used more than once into a
// register first, and on Zen 4 that broadcast runs on the shuffle unit that the widenings keep busy
// (vpmovzx, vpermps): MXFP8's decode tile took 7.4 against 6.4 cycles per block and row with it
// (docs/BENCHMARKS.md §0zd). The same operation, so the same bits.
M3_BLOCKED_AVX512 inline __m512 mul_broadcast512(__m512 v, const float* f) {
  __m512 r;
  asm("vmulps %2%{1to16%}, %1, %0" : "=v"(r) : "v"(v), "m"(*f));
  return r;
}
M3_BLOCKED_AVX512 inline __m512 add_broadcast512(__m512 v, const float* f) {
  __m512 r;
  asm("vaddps %2%{1to16%}, %1, %0" : "=v"(r) : "v"(v), "m"(*f));
  return r;
}
// a x b + the fp32 at f, broadcast by the multiply-add itself.
M3_BLOCKED_AVX512 inline __m512 fmadd_broadcast512(__m512 a, __m512 b, const float* f) {
  asm("vfmadd213ps %2%{1to16%}, %1, %0" : "+v"(a) : "v"(b), "m"(*f));
  return a;
}

// Block kb of the tile's MR rows of x: lanes 0-15 (pass 0) and 16-31 (pass 1) of each row.
template <int MR>
M3_BLOCKED_AVX512 inline void load_x512(const TileArgs& a, int64_t kb, __m512 (&x0)[MR], __m512 (&x1)[MR]) {
  const float* x = a.x + kb * a.x_block_stride;
  for (int m = 0; m < MR; ++m) {
    x0[m] = _mm512_loadu_ps(x + m * a.x_stride);
    x1[m] = _mm512_loadu_ps(x + m * a.x_stride + 16);
  }
}

template <class Policy, int MR, int NR>
M3_BLOCKED_AVX512 void tile512_checked(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  const typename Policy::Rows rows(w, n, row_step, NR);
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j] = _mm512_setzero_ps();
  const int64_t KB = a.K / kBlock;  // blocked formats have whole blocks
  const int group_blocks = 1 << Policy::blocks_per_group_log2(rows);
  BlockParams p[NR];
  for (int64_t kb0 = 0; kb0 < KB; kb0 += kParamBlocks) {
    const int nb = int(std::min<int64_t>(kParamBlocks, KB - kb0));
    for (int j = 0; j < NR; ++j) Policy::params(rows, j, kb0, nb, p[j]);
    for (int i0 = 0; i0 < nb; i0 += group_blocks) {
      typename Policy::Group512 g[NR];
      for (int j = 0; j < NR; ++j) g[j] = Policy::group512(rows, p[j], kb0 + i0, i0);
      for (int i = i0; i < i0 + group_blocks; ++i) {
        const int64_t kb = kb0 + i;
        __m512 x0[MR], x1[MR];
        load_x512<MR>(a, kb, x0, x1);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
          Policy::prefetch(rows, j, kb);
          __m512 w0, w1;
          Policy::widen512(rows, j, kb, p[j], g[j], i, w0, w1);
#pragma GCC unroll 4
          for (int m = 0; m < MR; ++m) acc[m][j] = _mm512_fmadd_ps(x1[m], w1, _mm512_fmadd_ps(x0[m], w0, acc[m][j]));
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j]);
}

template <class Policy, int MR, int NR>
M3_BLOCKED_AVX2 void tile256_checked(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  const typename Policy::Rows rows(w, n, row_step, NR);
  __m256 acc[MR][NR][2];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j][0] = acc[m][j][1] = _mm256_setzero_ps();
  const int64_t KB = a.K / kBlock;
  BlockParams p[NR];
  for (int64_t kb0 = 0; kb0 < KB; kb0 += kParamBlocks) {
    const int nb = int(std::min<int64_t>(kParamBlocks, KB - kb0));
    for (int j = 0; j < NR; ++j) Policy::params(rows, j, kb0, nb, p[j]);
    for (int i = 0; i < nb; ++i) {
      const int64_t kb = kb0 + i;
      const float* x = a.x + kb * a.x_block_stride;
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        Policy::prefetch(rows, j, kb);
        __m256 v[4];
        Policy::widen256(rows, j, kb, p[j], i, v);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) {
          const float* xm = x + m * a.x_stride;
          acc[m][j][0] =
              _mm256_fmadd_ps(_mm256_loadu_ps(xm + 16), v[2], _mm256_fmadd_ps(_mm256_loadu_ps(xm), v[0], acc[m][j][0]));
          acc[m][j][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xm + 24), v[3],
                                         _mm256_fmadd_ps(_mm256_loadu_ps(xm + 8), v[1], acc[m][j][1]));
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j][0], acc[m][j][1]);
}

// The panel fill of the same format (PanelFill, matmul_tile.h): blocks [kb0, kb1) of `rows` rows
// widened as the direct tiles widen them, stored block-major for the panel tiles (prefill).
template <class Policy>
M3_BLOCKED_AVX512 void fill512(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                               float* panel) {
  const typename Policy::Rows r(w, n, row_step, rows);
  BlockParams p;
  for (int j = 0; j < rows; ++j)
    for (int64_t c0 = kb0; c0 < kb1; c0 += kParamBlocks) {
      const int nb = int(std::min<int64_t>(kParamBlocks, kb1 - c0));
      Policy::params(r, j, c0, nb, p);
      for (int i = 0; i < nb; ++i) {
        const int64_t kb = c0 + i;
        Policy::prefetch(r, j, kb);
        __m512 w0, w1;
        Policy::widen512(r, j, kb, p, Policy::group512(r, p, kb, i), i, w0, w1);
        float* out = panel + ((kb - kb0) * rows + j) * kBlock;
        _mm512_store_ps(out, w0);
        _mm512_store_ps(out + 16, w1);
      }
    }
}

template <class Policy>
M3_BLOCKED_AVX2 void fill256(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                             float* panel) {
  const typename Policy::Rows r(w, n, row_step, rows);
  BlockParams p;
  for (int j = 0; j < rows; ++j)
    for (int64_t c0 = kb0; c0 < kb1; c0 += kParamBlocks) {
      const int nb = int(std::min<int64_t>(kParamBlocks, kb1 - c0));
      Policy::params(r, j, c0, nb, p);
      for (int i = 0; i < nb; ++i) {
        const int64_t kb = c0 + i;
        Policy::prefetch(r, j, kb);
        __m256 v[4];
        Policy::widen256(r, j, kb, p, i, v);
        float* out = panel + ((kb - kb0) * rows + j) * kBlock;
        for (int q = 0; q < 4; ++q) _mm256_store_ps(out + 8 * q, v[q]);
      }
    }
}

// Tables of the (MR, NR) shapes the planner asks for (run_range's direct tiles: nr is at most the
// path's nr_for_mr[mr] and at most 6 streams): AVX-512 mr <= 4, AVX2 mr <= 3 with nr <= 6, 3, 2.
// Each shape is a function of its own; the formats fill their tables (matmul_mxfp8.cpp).
using TileFn = void (*)(const LinearWeight&, int64_t, int64_t, const TileArgs&);
constexpr int kMaxMr = 4, kMaxNr = 8;
using Table = std::array<std::array<TileFn, kMaxNr + 1>, kMaxMr + 1>;

inline void run(const Table& t, const LinearWeight& w, int64_t n, int64_t row_step, int mr, int nr, const TileArgs& a) {
  if (mr < 1 || mr > kMaxMr || nr < 1 || nr > kMaxNr || t[size_t(mr)][size_t(nr)] == nullptr) std::abort();  // a planning bug
  t[size_t(mr)][size_t(nr)](w, n, row_step, a);
}

}  // namespace m3::matmul_detail::blocked
