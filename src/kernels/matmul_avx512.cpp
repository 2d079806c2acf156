// AVX-512 tile kernels for matmul: the lane order of matmul_tile.h, 16 lanes per zmm register.
// Compiled for plain x86-64 like the rest of the library; only these functions carry the target
// attribute, and matmul.cpp calls them only when cpu_features() reports AVX-512.
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

#define M3_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace m3::matmul_detail {
namespace {

// One 32-element block of a weight row as the two fp32 vectors of the lane order: pass 0 holds the
// elements p0(0..15), pass 1 the elements p1(0..15). Every widening is exact.
template <DType T>
struct Widen;

template <>
struct Widen<DType::BF16> {
  static constexpr int kBlockBytes = 64;
  // A bf16 pair read as one 32-bit word: the even element is the low half, so `<< 16` widens it;
  // the odd element is the high half, already in place once the low half is masked off.
  M3_AVX512 static inline __m512 pass0(const uint8_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16));
  }
  M3_AVX512 static inline __m512 pass1(const uint8_t* p) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi32(int(0xffff0000u))));
  }
};

template <>
struct Widen<DType::F16> {
  static constexpr int kBlockBytes = 64;
  M3_AVX512 static inline __m512 pass0(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  M3_AVX512 static inline __m512 pass1(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }
};

template <>
struct Widen<DType::F32> {
  static constexpr int kBlockBytes = 128;
  M3_AVX512 static inline __m512 pass0(const uint8_t* p) { return _mm512_loadu_ps(p); }
  M3_AVX512 static inline __m512 pass1(const uint8_t* p) { return _mm512_loadu_ps(p + 64); }
};

// acc[m][j] += block of x row m · block of weight row j, pass 0 then pass 1.
// x: packed block of the first row (rows xs floats apart); w: block of the first weight row.
template <DType T, int MR, int NR>
M3_AVX512 inline void add_block(const float* x, int64_t xs, const uint8_t* w, int64_t ws,
                                __m512 (&acc)[MR][NR]) {
  using W = Widen<T>;
  __m512 xv[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) xv[m] = _mm512_loadu_ps(x + m * xs);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const __m512 wv = W::pass0(w + j * ws);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) acc[m][j] = _mm512_fmadd_ps(xv[m], wv, acc[m][j]);
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) xv[m] = _mm512_loadu_ps(x + m * xs + 16);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const __m512 wv = W::pass1(w + j * ws);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) acc[m][j] = _mm512_fmadd_ps(xv[m], wv, acc[m][j]);
  }
}

// widen_rows streams weights from memory (prefill): it asks for them this far ahead along each row
// (measured on Zen 5: 1-2 KiB best, 512 B and 4 KiB clearly worse). The direct tiles (decode) ask
// direct_tile_prefetch_bytes() ahead, which depends on the L1 data cache.
constexpr int kPrefetchBytes = 1024;

template <DType T, int MR, int NR>
M3_AVX512 void tile(const TileArgs& a) {
  using W = Widen<T>;
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[m][j] = _mm512_setzero_ps();

  const int64_t full = a.K / kBlock;  // blocks that lie wholly inside a row
  const int64_t ahead = direct_tile_prefetch_bytes();
  for (int64_t kb = 0; kb < full; ++kb) {
    const uint8_t* w = a.w + kb * W::kBlockBytes;
    // The weights come from memory: ask for them ahead, one stream per row.
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      for (int off = 0; off < W::kBlockBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + j * a.w_stride + ahead + off), _MM_HINT_T0);
    add_block<T, MR, NR>(a.x + kb * a.x_block_stride, a.x_stride, w, a.w_stride, acc);
  }
  if (full * kBlock < a.K) {
    // The partial last block: copy the rows' tails into zeroed blocks (never read past a row).
    alignas(64) uint8_t tail[NR][W::kBlockBytes];
    std::memset(tail, 0, sizeof tail);
    const size_t bytes = size_t(a.K - full * kBlock) * dtype_size(T);
    for (int j = 0; j < NR; ++j) std::memcpy(tail[j], a.w + j * a.w_stride + full * W::kBlockBytes, bytes);
    add_block<T, MR, NR>(a.x + full * a.x_block_stride, a.x_stride, &tail[0][0], W::kBlockBytes, acc);
  }

  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j]);
}

// Panel tiles: weights already widened (block-major panel), so the loop is loads and FMAs only.
template <int MR, int NR>
M3_AVX512 void panel_tile(const PanelArgs& a) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      acc[m][j] = a.resume ? _mm512_loadu_ps(a.lanes + (m * NR + j) * kLanes) : _mm512_setzero_ps();

  const float* x = a.x;
  const float* p = a.panel;
  for (int64_t b = 0; b < a.blocks; ++b, x += a.x_block_stride, p += NR * kBlock) {
    if (a.prefetch != nullptr)
      for (int j = 0; j < NR; ++j) {
        const char* next = reinterpret_cast<const char*>(a.prefetch + j * a.prefetch_stride);
        for (int off = 0; off < a.prefetch_block_bytes; off += 64)
          _mm_prefetch(next + b * a.prefetch_block_bytes + off, _MM_HINT_T1);
      }
    __m512 xv[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) xv[m] = _mm512_loadu_ps(x + m * a.x_stride);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = _mm512_load_ps(p + j * kBlock);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][j] = _mm512_fmadd_ps(xv[m], wv, acc[m][j]);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) xv[m] = _mm512_loadu_ps(x + m * a.x_stride + kLanes);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = _mm512_load_ps(p + j * kBlock + kLanes);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][j] = _mm512_fmadd_ps(xv[m], wv, acc[m][j]);
    }
  }

  if (a.y != nullptr) {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      float* y = a.y + m * a.y_stride;
      int j = 0;
#pragma GCC unroll 2
      for (; j + 4 <= NR; j += 4) {  // four outputs' sums at once
        const __m128 t = reduce16x4(acc[m][j], acc[m][j + 1], acc[m][j + 2], acc[m][j + 3]);
        if (a.y_col_stride == 1) {
          _mm_storeu_ps(y + j, t);
        } else {
          alignas(16) float four[4];
          _mm_store_ps(four, t);
          for (int i = 0; i < 4; ++i) y[(j + i) * a.y_col_stride] = four[i];
        }
      }
      for (; j < NR; ++j) y[j * a.y_col_stride] = reduce16(acc[m][j]);
    }
  } else {
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) _mm512_storeu_ps(a.lanes + (m * NR + j) * kLanes, acc[m][j]);
  }
}

template <DType T>
M3_AVX512 void widen_rows_t(const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0, int64_t kb1,
                            float* panel) {
  using W = Widen<T>;
  const int64_t full = K / kBlock;
  const int64_t end = std::min(kb1, full);
  float* out = panel;
  // All rows side by side, block by block, prefetching ahead in each: the rows are streams from
  // memory, and the next chunk of the same rows is what is read next when weights go outermost.
  for (int64_t kb = kb0; kb < end; ++kb)
    for (int j = 0; j < rows; ++j, out += kBlock) {
      const uint8_t* src = w + j * row_bytes + kb * W::kBlockBytes;
      for (int off = 0; off < W::kBlockBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchBytes + off), _MM_HINT_T0);
      _mm512_store_ps(out, W::pass0(src));
      _mm512_store_ps(out + kLanes, W::pass1(src));
    }
  if (kb1 > full) {
    for (int j = 0; j < rows; ++j, out += kBlock) {
      alignas(64) uint8_t tail[W::kBlockBytes];
      std::memset(tail, 0, sizeof tail);
      std::memcpy(tail, w + j * row_bytes + full * W::kBlockBytes, size_t(K - full * kBlock) * dtype_size(T));
      _mm512_store_ps(out, W::pass0(tail));
      _mm512_store_ps(out + kLanes, W::pass1(tail));
    }
  }
}

void widen_rows(DType dtype, const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0, int64_t kb1,
                float* panel) {
  if (dtype == DType::BF16) widen_rows_t<DType::BF16>(w, row_bytes, rows, K, kb0, kb1, panel);
  else if (dtype == DType::F16) widen_rows_t<DType::F16>(w, row_bytes, rows, K, kb0, kb1, panel);
  else widen_rows_t<DType::F32>(w, row_bytes, rows, K, kb0, kb1, panel);
}

// Tile shapes: 32 zmm registers hold mr*nr accumulators, mr x vectors, one widened weight vector
// and the bf16 mask.
constexpr int kMaxMr = 4;
constexpr int kNr[kMaxMr + 1] = {0, 8, 8, 8, 6};

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
          make_row<T, 3>(std::make_integer_sequence<int, kNr[3]>{}),
          make_row<T, 4>(std::make_integer_sequence<int, kNr[4]>{})};
}

constexpr auto kBf16 = make_table<DType::BF16>();
constexpr auto kF16 = make_table<DType::F16>();
constexpr auto kF32 = make_table<DType::F32>();

void run(DType dtype, int mr, int nr, const TileArgs& args) {
  const auto& table = dtype == DType::BF16 ? kBf16 : dtype == DType::F16 ? kF16 : kF32;
  if (mr < 1 || mr > kMaxMr || nr < 1 || nr > kNr[mr]) std::abort();  // a planning bug, not bad input
  table[size_t(mr)][size_t(nr)](args);
}

// Panel tiles: mr*nr accumulators, mr x vectors and one weight vector.
constexpr int kPanelMr = 4, kPanelNr = 6;
using PanelFn = void (*)(const PanelArgs&);
using PanelRow = std::array<PanelFn, kPanelNr + 1>;

template <int MR, int... I>
constexpr PanelRow make_panel_row(std::integer_sequence<int, I...>) {
  PanelRow r{};
  ((r[I + 1] = &panel_tile<MR, I + 1>), ...);
  return r;
}

template <int... I>
constexpr std::array<PanelRow, kPanelMr + 1> make_panel_table(std::integer_sequence<int, I...>) {
  return {PanelRow{}, make_panel_row<I + 1>(std::make_integer_sequence<int, kPanelNr>{})...};
}

constexpr auto kPanel = make_panel_table(std::make_integer_sequence<int, kPanelMr>{});

void run_panel(int mr, int nr, const PanelArgs& args) {
  if (mr < 1 || mr > kPanelMr || nr < 1 || nr > kPanelNr) std::abort();  // a planning bug
  kPanel[size_t(mr)][size_t(nr)](args);
}

constexpr TileKernels kKernels{"avx512", kMaxMr,    {kNr[0], kNr[1], kNr[2], kNr[3], kNr[4]},
                               &run,     kPanelMr,  kPanelNr,
                               &run_panel, &widen_rows};

}  // namespace

const TileKernels* avx512_tile_kernels() { return &kKernels; }

}  // namespace m3::matmul_detail

#else

namespace m3::matmul_detail {
const TileKernels* avx512_tile_kernels() { return nullptr; }
}  // namespace m3::matmul_detail

#endif
