// AVX2 direct tiles for matmul (decode and small batches): the lane order of matmul_tile.h with
// each output's 16 lanes held in two ymm registers (lanes 0-7 and 8-15), so the results equal the
// AVX-512 kernels' bit for bit. The AVX2 panel tiles are the Highway ones (matmul_simd.cpp).
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

// Direct tiles stream weights from memory: they ask for them direct_tile_prefetch_bytes() ahead.
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
  const int64_t ahead = direct_tile_prefetch_bytes();
  for (int64_t kb = 0; kb < full; ++kb) {
    const uint8_t* w = a.w + kb * W::kBlockBytes;
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      for (int off = 0; off < W::kBlockBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + j * a.w_stride + ahead + off), _MM_HINT_T0);
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

// Direct tiles only: the AVX2 panel tiles and widen_rows are the Highway ones (matmul_simd.cpp),
// which measured faster; matmul.cpp joins the two.
constexpr TileKernels kKernels{"avx2", kMaxMr, {kNr[0], kNr[1], kNr[2], kNr[3], 0}, &run, 0, 0, nullptr, nullptr};

}  // namespace

const TileKernels* avx2_tile_kernels() { return &kKernels; }

}  // namespace m3::matmul_detail

#else

namespace m3::matmul_detail {
const TileKernels* avx2_tile_kernels() { return nullptr; }
}  // namespace m3::matmul_detail

#endif
