// AVX2 tile kernels for matmul: the lane order of matmul_tile.h with each output's 16 lanes held in
// two ymm registers (lanes 0-7 and 8-15), so the results equal the AVX-512 kernels' bit for bit.
// Only these functions carry the target attribute; matmul.cpp calls them only on AVX2+FMA+F16C CPUs.
#include "kernels/matmul_tile.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12 reports the intrinsics' own placeholder operands (_mm512_undefined_*) as (maybe-)
// uninitialized once they are inlined into target-attributed functions: the header's, not ours.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/matmul_reduce.h"

#define M3_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace m3::matmul_detail {
namespace {

// Half h (lanes 8h..8h+7) of pass 0 or 1 of one 32-element block, widened exactly to fp32.
template <DType T>
struct Widen;

template <>
struct Widen<DType::BF16> {
  static constexpr int kBlockBytes = 64;
  // Bytes [32h, 32h+32) hold the bf16 pairs of lanes 8h..8h+7: even element low, odd element high.
  template <int Pass, int H>
  M3_AVX2 static inline __m256 get(const uint8_t* p) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * H));
    if constexpr (Pass == 0) return _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    else return _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(int(0xffff0000u))));
  }
};

template <>
struct Widen<DType::F16> {
  static constexpr int kBlockBytes = 64;
  template <int Pass, int H>
  M3_AVX2 static inline __m256 get(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 * Pass + 16 * H)));
  }
};

template <>
struct Widen<DType::F32> {
  static constexpr int kBlockBytes = 128;
  template <int Pass, int H>
  M3_AVX2 static inline __m256 get(const uint8_t* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 16 * Pass + 8 * H);
  }
};

template <DType T, int MR, int NR, int Pass, int H>
M3_AVX2 inline void add_half(const float* x, int64_t xs, const uint8_t* w, int64_t ws, __m256 (&acc)[MR][NR][2]) {
  __m256 xv[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) xv[m] = _mm256_loadu_ps(x + m * xs + 16 * Pass + 8 * H);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const __m256 wv = Widen<T>::template get<Pass, H>(w + j * ws);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) acc[m][j][H] = _mm256_fmadd_ps(xv[m], wv, acc[m][j][H]);
  }
}

// acc[m][j] += block of x row m · block of weight row j; per accumulator pass 0 comes before pass 1.
template <DType T, int MR, int NR>
M3_AVX2 inline void add_block(const float* x, int64_t xs, const uint8_t* w, int64_t ws, __m256 (&acc)[MR][NR][2]) {
  add_half<T, MR, NR, 0, 0>(x, xs, w, ws, acc);
  add_half<T, MR, NR, 1, 0>(x, xs, w, ws, acc);
  add_half<T, MR, NR, 0, 1>(x, xs, w, ws, acc);
  add_half<T, MR, NR, 1, 1>(x, xs, w, ws, acc);
}

// Direct tiles and widen_rows stream weights from memory: they ask for them this far ahead.
constexpr int kPrefetchBytes = 1024;

template <DType T, int MR, int NR>
M3_AVX2 void tile(const TileArgs& a) {
  using W = Widen<T>;
  __m256 acc[MR][NR][2];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) acc[m][j][h] = _mm256_setzero_ps();

  const int64_t full = a.K / kBlock;
  for (int64_t kb = 0; kb < full; ++kb) {
    const uint8_t* w = a.w + kb * W::kBlockBytes;
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      for (int off = 0; off < W::kBlockBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + j * a.w_stride + kPrefetchBytes + off), _MM_HINT_T0);
    add_block<T, MR, NR>(a.x + kb * a.x_block_stride, a.x_stride, w, a.w_stride, acc);
  }
  if (full * kBlock < a.K) {
    alignas(32) uint8_t tail[NR][W::kBlockBytes];
    std::memset(tail, 0, sizeof tail);
    const size_t bytes = size_t(a.K - full * kBlock) * dtype_size(T);
    for (int j = 0; j < NR; ++j) std::memcpy(tail[j], a.w + j * a.w_stride + full * W::kBlockBytes, bytes);
    add_block<T, MR, NR>(a.x + full * a.x_block_stride, a.x_stride, &tail[0][0], W::kBlockBytes, acc);
  }

  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j][0], acc[m][j][1]);
}

// Panel tiles: weights already widened (block-major panel); per accumulator pass 0 before pass 1.
template <int MR, int NR, int Pass, int H>
M3_AVX2 inline void panel_half(const float* x, int64_t xs, const float* p, __m256 (&acc)[MR][NR][2]) {
  __m256 xv[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) xv[m] = _mm256_loadu_ps(x + m * xs + 16 * Pass + 8 * H);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const __m256 wv = _mm256_load_ps(p + j * kBlock + 16 * Pass + 8 * H);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) acc[m][j][H] = _mm256_fmadd_ps(xv[m], wv, acc[m][j][H]);
  }
}

template <int MR, int NR>
M3_AVX2 void panel_tile(const PanelArgs& a) {
  __m256 acc[MR][NR][2];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        acc[m][j][h] = a.resume ? _mm256_loadu_ps(a.lanes + (m * NR + j) * kLanes + 8 * h) : _mm256_setzero_ps();

  const float* x = a.x;
  const float* p = a.panel;
  for (int64_t b = 0; b < a.blocks; ++b, x += a.x_block_stride, p += NR * kBlock) {
    if (a.prefetch != nullptr)
      for (int j = 0; j < NR; ++j) {
        const char* next = reinterpret_cast<const char*>(a.prefetch + j * a.prefetch_stride);
        for (int off = 0; off < a.prefetch_block_bytes; off += 64)
          _mm_prefetch(next + b * a.prefetch_block_bytes + off, _MM_HINT_T1);
      }
    panel_half<MR, NR, 0, 0>(x, a.x_stride, p, acc);
    panel_half<MR, NR, 1, 0>(x, a.x_stride, p, acc);
    panel_half<MR, NR, 0, 1>(x, a.x_stride, p, acc);
    panel_half<MR, NR, 1, 1>(x, a.x_stride, p, acc);
  }

  if (a.y != nullptr) {
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j][0], acc[m][j][1]);
  } else {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) _mm256_storeu_ps(a.lanes + (m * NR + j) * kLanes + 8 * h, acc[m][j][h]);
  }
}

// One block of one row into the 32 floats of the lane order (pass 0 lanes 0-15, then pass 1).
template <DType T>
M3_AVX2 inline void widen_block(const uint8_t* src, float* out) {
  using W = Widen<T>;
  _mm256_store_ps(out, W::template get<0, 0>(src));
  _mm256_store_ps(out + 8, W::template get<0, 1>(src));
  _mm256_store_ps(out + 16, W::template get<1, 0>(src));
  _mm256_store_ps(out + 24, W::template get<1, 1>(src));
}

template <DType T>
M3_AVX2 void widen_rows_t(const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0, int64_t kb1,
                          float* panel) {
  using W = Widen<T>;
  const int64_t full = K / kBlock;
  const int64_t end = std::min(kb1, full);
  float* out = panel;
  // All rows side by side, block by block, prefetching ahead in each (see the AVX-512 version).
  for (int64_t kb = kb0; kb < end; ++kb)
    for (int j = 0; j < rows; ++j, out += kBlock) {
      const uint8_t* src = w + j * row_bytes + kb * W::kBlockBytes;
      for (int off = 0; off < W::kBlockBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchBytes + off), _MM_HINT_T0);
      widen_block<T>(src, out);
    }
  if (kb1 > full) {
    for (int j = 0; j < rows; ++j, out += kBlock) {
      alignas(32) uint8_t tail[W::kBlockBytes];
      std::memset(tail, 0, sizeof tail);
      std::memcpy(tail, w + j * row_bytes + full * W::kBlockBytes, size_t(K - full * kBlock) * dtype_size(T));
      widen_block<T>(tail, out);
    }
  }
}

void widen_rows(DType dtype, const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0, int64_t kb1,
                float* panel) {
  if (dtype == DType::BF16) widen_rows_t<DType::BF16>(w, row_bytes, rows, K, kb0, kb1, panel);
  else if (dtype == DType::F16) widen_rows_t<DType::F16>(w, row_bytes, rows, K, kb0, kb1, panel);
  else widen_rows_t<DType::F32>(w, row_bytes, rows, K, kb0, kb1, panel);
}

// 16 ymm registers: 2*mr*nr accumulators (12 at most), mr x vectors and one weight vector.
constexpr int kMaxMr = 3;
constexpr int kNr[kMaxMr + 1] = {0, 6, 3, 2};

using TileFn = void (*)(const TileArgs&);
using Row = std::array<TileFn, 9>;

template <DType T, int MR, int... I>
constexpr Row make_row(std::integer_sequence<int, I...>) {
  Row r{};
  ((r[I + 1] = &tile<T, MR, I + 1>), ...);
  return r;
}

template <DType T>
constexpr std::array<Row, kMaxMr + 1> make_table() {
  return {Row{}, make_row<T, 1>(std::make_integer_sequence<int, kNr[1]>{}),
          make_row<T, 2>(std::make_integer_sequence<int, kNr[2]>{}),
          make_row<T, 3>(std::make_integer_sequence<int, kNr[3]>{})};
}

constexpr auto kBf16 = make_table<DType::BF16>();
constexpr auto kF16 = make_table<DType::F16>();
constexpr auto kF32 = make_table<DType::F32>();

void run(DType dtype, int mr, int nr, const TileArgs& args) {
  const auto& table = dtype == DType::BF16 ? kBf16 : dtype == DType::F16 ? kF16 : kF32;
  if (mr < 1 || mr > kMaxMr || nr < 1 || nr > kNr[mr]) std::abort();  // a planning bug, not bad input
  table[size_t(mr)][size_t(nr)](args);
}

constexpr int kPanelMr = 3, kPanelNr = 2;
using PanelFn = void (*)(const PanelArgs&);
constexpr PanelFn kPanel[kPanelMr + 1][kPanelNr + 1] = {{nullptr, nullptr, nullptr},
                                                        {nullptr, &panel_tile<1, 1>, &panel_tile<1, 2>},
                                                        {nullptr, &panel_tile<2, 1>, &panel_tile<2, 2>},
                                                        {nullptr, &panel_tile<3, 1>, &panel_tile<3, 2>}};

void run_panel(int mr, int nr, const PanelArgs& args) {
  if (mr < 1 || mr > kPanelMr || nr < 1 || nr > kPanelNr) std::abort();  // a planning bug
  kPanel[mr][nr](args);
}

constexpr TileKernels kKernels{"avx2",     kMaxMr,   {kNr[0], kNr[1], kNr[2], kNr[3], 0},
                               &run,       kPanelMr, kPanelNr,
                               &run_panel, &widen_rows};

}  // namespace

const TileKernels* avx2_tile_kernels() { return &kKernels; }

}  // namespace m3::matmul_detail

#else

namespace m3::matmul_detail {
const TileKernels* avx2_tile_kernels() { return nullptr; }
}  // namespace m3::matmul_detail

#endif
