// AVX-512 loops of machine_bounds.cpp, compiled for AVX-512 and called only after a CPU check.
#include "base/machine_bounds_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC target("avx512f")
// GCC 12 flags its own _mm512_undefined_* helpers inside the reductions; nothing reads them.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace m3 {

namespace {

// 12 independent FMA chains hide the FMA latency on 2 FMA ports.
float fma_loop(int64_t iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + 1e-7f * i);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

float sum_floats(const float* p, size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(p + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(p + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(p + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(p + i + 48));
  }
  float r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  for (; i < n; ++i) r += p[i];
  return r;
}

float sum_float_streams(const float* p, size_t n) {
  const size_t each = n / kReadStreams / 16 * 16;
  __m512 s[kReadStreams];
  for (int k = 0; k < kReadStreams; ++k) s[k] = _mm512_setzero_ps();
  for (size_t i = 0; i < each; i += 16)
    for (int k = 0; k < kReadStreams; ++k) {
      const float* q = p + size_t(k) * each + i;
      _mm_prefetch(reinterpret_cast<const char*>(q) + kStreamPrefetchBytes, _MM_HINT_T0);
      s[k] = _mm512_add_ps(s[k], _mm512_loadu_ps(q));
    }
  __m512 t = s[0];
  for (int k = 1; k < kReadStreams; ++k) t = _mm512_add_ps(t, s[k]);
  float r = _mm512_reduce_add_ps(t);
  for (size_t i = each * kReadStreams; i < n; ++i) r += p[i];
  return r;
}

constexpr BoundKernels kAvx512{"avx512", &fma_loop, 12.0 * 16 * 2, &sum_floats, &sum_float_streams};

}  // namespace

const BoundKernels* avx512_bound_kernels() { return &kAvx512; }

}  // namespace m3

#else

namespace m3 {
const BoundKernels* avx512_bound_kernels() { return nullptr; }
}  // namespace m3

#endif
