#pragma once
// The fixed 16-lane sum of matmul_tile.h's lane order, on AVX-512 (one zmm) and AVX2 (lanes 0-7 and
// 8-15 in two ymm): s8[i] = a[i] + a[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2],
// y = s2[0] + s2[1]. Every tile of every path ends with it, so the paths agree bit for bit.
// Only for files compiled with per-function targets (the tile and format kernels).
#include <immintrin.h>

namespace m3::matmul_detail {

__attribute__((target("avx512f,avx512dq,avx2,fma"))) inline float reduce16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm512_extractf32x8_ps(v, 1);
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
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

}  // namespace m3::matmul_detail
