// The affine formats' panel fill and direct tiles on AVX2 and AVX-512 (mlx-lm's layout,
// format/weight_format.h): 4- or 8-bit unsigned values unpacked in registers, converted to fp32
// and mapped through their group's scale and bias. scale x q is exact in fp32 (a bf16 scale has 8 significant bits, q at
// most 8), so the fused multiply-add here rounds exactly where the format's scalar
// dequantize_cols (multiply, then add) does: the same bits (checked in affine_format_test).
// A 32-column block lies within one group (groups are 32, 64 or 128 columns).
#include "kernels/matmul_tile.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdlib>

#include "kernels/matmul_blocked_tile.h"

#define M3_AVX2 __attribute__((target("avx2,fma,f16c")))
#define M3_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace m3::matmul_detail {
namespace {

constexpr int kPrefetchAhead = 512;  // bytes ahead in each row
constexpr int kMaxPanelRows = 16;    // more than any path's panel_nr

struct RowPointers {
  const uint8_t* q[kMaxPanelRows];
  const uint16_t* scales[kMaxPanelRows];
  const uint16_t* biases[kMaxPanelRows];
  RowPointers(const LinearWeight& w, int64_t n, int64_t row_step, int rows) {
    if (rows > kMaxPanelRows) std::abort();  // a planning bug
    for (int j = 0; j < rows; ++j) {
      q[j] = w.row_ptr(n + j * row_step);
      scales[j] = reinterpret_cast<const uint16_t*>(w.side_row(0, n + j * row_step));
      biases[j] = reinterpret_cast<const uint16_t*>(w.side_row(1, n + j * row_step));
    }
  }
};

// Block kb lies in group kb >> shift (groups are 1, 2 or 4 blocks): a shift, where a division per
// block and row measurably slowed decode.
inline int blocks_per_group_log2(const LinearWeight& w) { return __builtin_ctzll(uint64_t(w.format->block_cols / kBlock)); }

// The 32 values of a block as bytes 0..31 (element order), from 16 (4-bit) or 32 (8-bit) bytes.
template <int Bits>
M3_AVX2 inline void unpack(const uint8_t* p, __m128i& lo16, __m128i& hi16) {
  if constexpr (Bits == 8) {
    lo16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    hi16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
  } else {
    // Byte i holds element 2i in its low nibble and 2i + 1 in its high one.
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i even = _mm_and_si128(v, mask), odd = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    lo16 = _mm_unpacklo_epi8(even, odd);
    hi16 = _mm_unpackhi_epi8(even, odd);
  }
}

// The affine formats for the direct tiles and panel fills (matmul_blocked_tile.h).
template <int Bits>
struct AffinePolicy {
  static constexpr int kBlockBytes = kBlock * Bits / 8;
  struct Rows {
    RowPointers p;
    int shift;
    Rows(const LinearWeight& w, int64_t n, int64_t row_step, int nr)
        : p(w, n, row_step, nr), shift(blocks_per_group_log2(w)) {}
  };
  static void prefetch(const Rows& r, int j, int64_t kb) {
    _mm_prefetch(reinterpret_cast<const char*>(r.p.q[j] + kb * kBlockBytes + kPrefetchAhead), _MM_HINT_T0);
  }
  // The group's scale and bias are converted in the widening itself: converting them a chunk at a
  // time (BlockParams) measured slower for these formats, which have one pair per 1-4 blocks.
  static void params(const Rows&, int, int64_t, int, blocked::BlockParams&) {}
  template <bool Checked>
  M3_AVX512 static void widen512(const Rows& r, int j, int64_t kb, const blocked::BlockParams&, int, __m512& w0,
                                 __m512& w1, uint32_t&) {
    const int64_t g = kb >> r.shift;
    const __m512 s = _mm512_set1_ps(bf16_to_f32(r.p.scales[j][g])), b = _mm512_set1_ps(bf16_to_f32(r.p.biases[j][g]));
    __m128i lo, hi;
    unpack<Bits>(r.p.q[j] + kb * kBlockBytes, lo, hi);
    w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), s, b);
    w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), s, b);
  }
  template <bool Checked>
  M3_AVX2 static void widen256(const Rows& r, int j, int64_t kb, const blocked::BlockParams&, int, __m256 (&v)[4],
                               __m256i&) {
    const int64_t g = kb >> r.shift;
    const __m256 s = _mm256_set1_ps(bf16_to_f32(r.p.scales[j][g])), b = _mm256_set1_ps(bf16_to_f32(r.p.biases[j][g]));
    __m128i lo, hi;
    unpack<Bits>(r.p.q[j] + kb * kBlockBytes, lo, hi);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int q = 0; q < 4; ++q) v[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[q])), s, b);
  }
};

constexpr blocked::Table kDirect512x4 = blocked::make_table<AffinePolicy<4>, true>();
constexpr blocked::Table kDirect512x8 = blocked::make_table<AffinePolicy<8>, true>();
constexpr blocked::Table kDirect256x4 = blocked::make_table<AffinePolicy<4>, false>();
constexpr blocked::Table kDirect256x8 = blocked::make_table<AffinePolicy<8>, false>();

template <const blocked::Table& T>
void direct(const LinearWeight& w, int64_t n, int64_t row_step, int mr, int nr, const TileArgs& a) {
  blocked::run(T, w, n, row_step, mr, nr, a);
}

}  // namespace

BlockedTile affine_direct_tile(CpuPath path, int bits) {
  if (bits != 4 && bits != 8) return nullptr;
  switch (path) {
    case CpuPath::Avx2: return bits == 4 ? &direct<kDirect256x4> : &direct<kDirect256x8>;
    case CpuPath::Avx512: return bits == 4 ? &direct<kDirect512x4> : &direct<kDirect512x8>;
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
PanelFill affine_panel_fill(CpuPath, int) { return nullptr; }
BlockedTile affine_direct_tile(CpuPath, int) { return nullptr; }
}  // namespace m3::matmul_detail

#endif
