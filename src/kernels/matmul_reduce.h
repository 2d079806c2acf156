#pragma once
// The fixed 16-lane sum of matmul_tile.h's lane order, on AVX-512 (one zmm) and AVX2 (lanes 0-7 and
// 8-15 in two ymm): s8[i] = a[i] + a[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2],
// y = s2[0] + s2[1]. Every tile of every path ends with it, so the paths agree bit for bit.
// Only for files compiled with per-function targets (the tile and format kernels).
#include <immintrin.h>

namespace m3::matmul_detail {

// s4 of one zmm: s8 = its halves added, s4 = s8's halves added.
__attribute__((target("avx512f,avx512dq,avx2,fma"))) inline __m128 s4_of(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  return _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) inline float reduce16(__m512 v) {
  const __m128 s4 = s4_of(v);
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

__attribute__((target("avx2,fma"))) inline float reduce16(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

// The same sums of four outputs at once, the totals in lanes 0-3: each output's s4 as above, then
// (s4[0] + s4[2]) + (s4[1] + s4[3]) for all four in three vector adds, where four reduce16 calls
// took a scalar add and a shuffle each (the panel tiles' last chunk, docs/BENCHMARKS.md §0za).
__attribute__((target("avx2,fma"))) inline __m128 totals4(__m128 a, __m128 b, __m128 c, __m128 d) {
  const __m128 ab = _mm_add_ps(_mm_unpacklo_ps(a, b), _mm_unpackhi_ps(a, b));  // a0+a2, b0+b2, a1+a3, b1+b3
  const __m128 cd = _mm_add_ps(_mm_unpacklo_ps(c, d), _mm_unpackhi_ps(c, d));
  return _mm_add_ps(_mm_movelh_ps(ab, cd), _mm_movehl_ps(cd, ab));
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) inline __m128 reduce16x4(__m512 a, __m512 b, __m512 c,
                                                                               __m512 d) {
  return totals4(s4_of(a), s4_of(b), s4_of(c), s4_of(d));
}

}  // namespace m3::matmul_detail
