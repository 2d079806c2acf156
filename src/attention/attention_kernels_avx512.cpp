// AVX-512 attention inner loops: the avx512 table of AttentionKernels (base/cpu_dispatch.h). The
// whole file is compiled for AVX-512 (pragma below) and only called after a run-time CPU check.
// Everything here has internal linkage and uses no std:: templates, so no AVX-512 copy of a shared
// inline function can leak into the generic code.
#include "attention/attention_kernels_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC target("avx512f,avx512bw,avx512vl")  // BW+VL: masked 16-bit loads of bf16 keys
// GCC 12 flags its own _mm512_undefined_* helpers; nothing here reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace m3 {

namespace {

inline __mmask16 tail_mask(int n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// 16 K/V elements as fp32: fp32 as is, bf16 widened exactly (its bits become the high half).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 maskz_load16(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 maskz_load16(__mmask16 m, const uint16_t* p) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// exp(x) for x <= 0 (softmax weights): 2^(x·log2e) by range reduction, degree-6 polynomial for
// 2^f on [-0.5, 0.5]; relative error ~2e-7, and exactly 0 for -inf.
inline __m512 exp_ps(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // below this exp underflows to 0 anyway
  const __m512 t = _mm512_mul_ps(x, log2e);
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // f = t - n, computed as x·log2e - n with the product split to keep precision.
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Requests a region into L2 spread over a loop: step() asks for the next per_step cache lines.
struct Prefetch {
  const char* p = nullptr;
  const char* end = nullptr;
  int per_step = 0;
  // Spreads `bytes` from `region` over about `steps` calls of step().
  Prefetch(const void* region, size_t bytes, int64_t steps) {
    if (!region || bytes == 0 || steps <= 0) return;
    p = static_cast<const char*>(region);
    end = p + bytes;
    const int64_t lines = int64_t((bytes + 63) / 64);
    per_step = int((lines + steps - 1) / steps);
  }
  Prefetch() = default;
  inline void step() {
    for (int i = 0; i < per_step && p < end; ++i, p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
};

// Scores of up to 4 queries against 16·V keys starting at key t0 (V vectors, last one masked).
// The accumulators are locals until the end: __m512 is a may_alias type, so accumulating straight
// into the caller's array would force a load and store around every FMA.
template <int Q, int V, typename T>
inline void qk_tile(const float* q, int dim, const T* kT, int kt_stride, int t0, __mmask16 last,
                    __m512 out[Q][V], Prefetch& pf) {
  __m512 acc[Q][V];
  for (int i = 0; i < Q; ++i)
    for (int j = 0; j < V; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int d = 0; d < dim; ++d) {
    pf.step();
    const T* k = kT + int64_t(d) * kt_stride + t0;
    __m512 kv[V];
    for (int j = 0; j < V; ++j) kv[j] = j == V - 1 ? maskz_load16(last, k + 16 * j) : load16(k + 16 * j);
    for (int i = 0; i < Q; ++i) {
      const __m512 qb = _mm512_set1_ps(q[int64_t(i) * dim + d]);
      for (int j = 0; j < V; ++j) acc[i][j] = _mm512_fmadd_ps(qb, kv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < Q; ++i)
    for (int j = 0; j < V; ++j) out[i][j] = acc[i][j];
}

// Runs fn(acc tile) over all (query tile, key tile) pairs with 4 queries × 4 key vectors where possible.
// A remainder of 2 or 3 queries (decode: one query per KV group or head) is one tile, not single
// queries: the keys are loaded once and the independent FMA chains double or triple. Every score is
// still one sequential sum over d, so the tiling never changes a result.
template <typename T, typename Store>
void qk_for_tiles(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, Store store,
                  Prefetch& pf) {
  auto keys = [&](auto qtag, const float* qi, int i0) {
    constexpr int Q = decltype(qtag)::value;
    int t0 = 0;
    for (; t0 + 64 <= n_keys; t0 += 64) {
      __m512 acc[Q][4];
      qk_tile<Q, 4>(qi, dim, kT, kt_stride, t0, 0xffff, acc, pf);
      for (int j = 0; j < 4; ++j) store(i0, Q, t0 + 16 * j, 0xffff, [&](int i) { return acc[i][j]; });
    }
    for (; t0 < n_keys; t0 += 16) {
      const __mmask16 m = tail_mask(n_keys - t0);
      __m512 acc[Q][1];
      qk_tile<Q, 1>(qi, dim, kT, kt_stride, t0, m, acc, pf);
      store(i0, Q, t0, m, [&](int i) { return acc[i][0]; });
    }
  };
  int i0 = 0;
  for (; i0 + 4 <= nq; i0 += 4) keys(std::integral_constant<int, 4>{}, q + int64_t(i0) * dim, i0);
  if (nq - i0 == 3) keys(std::integral_constant<int, 3>{}, q + int64_t(i0) * dim, i0);
  else if (nq - i0 == 2) keys(std::integral_constant<int, 2>{}, q + int64_t(i0) * dim, i0);
  else if (nq - i0 == 1) keys(std::integral_constant<int, 1>{}, q + int64_t(i0) * dim, i0);
}

template <typename T>
void qk_scores_avx512(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* S, int ld,
                      const void* pf_region, size_t pf_bytes) {
  // dim steps per (query tile, key tile)
  Prefetch pf(pf_region, pf_bytes, int64_t(dim) * ((nq + 3) / 4) * ((n_keys + 63) / 64));
  qk_for_tiles(q, nq, dim, kT, kt_stride, n_keys, [&](int i0, int Q, int t, __mmask16 m, auto get) {
    for (int i = 0; i < Q; ++i) _mm512_mask_storeu_ps(S + int64_t(i0 + i) * ld + t, m, get(i));
  }, pf);
}

template <typename T>
void qk_block_max_avx512(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out,
                         const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, int64_t(dim) * ((nq + 3) / 4) * ((n_keys + 63) / 64));
  // Running per-query maxima as vectors, reduced once at the end.
  for (int i0 = 0; i0 < nq; i0 += 64) {
    const int nb = (nq - i0 < 64 ? nq - i0 : 64);
    __m512 best[64];
    for (int i = 0; i < nb; ++i) best[i] = _mm512_set1_ps(-INFINITY);
    qk_for_tiles(q + int64_t(i0) * dim, nb, dim, kT, kt_stride, n_keys, [&](int a, int Q, int, __mmask16 m, auto get) {
      for (int i = 0; i < Q; ++i) best[a + i] = _mm512_mask_max_ps(best[a + i], m, best[a + i], get(i));
    }, pf);
    for (int i = 0; i < nb; ++i) out[i0 + i] = _mm512_reduce_max_ps(best[i]);
  }
}

void softmax_update_avx512(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int hd) {
  for (int h = 0; h < heads; ++h) {
    float* s = S + int64_t(h) * ld;
    __m512 vmax = _mm512_set1_ps(m[h]);
    for (int t = 0; t < n_keys; t += 16) {
      const __mmask16 k = tail_mask(n_keys - t);
      vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_maskz_loadu_ps(k, s + t));
    }
    const float mx = _mm512_reduce_max_ps(vmax);
    const float corr = std::exp(m[h] - mx);
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 vsum = _mm512_setzero_ps();
    for (int t = 0; t < n_keys; t += 16) {
      const __mmask16 k = tail_mask(n_keys - t);
      const __m512 p = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t), vm));
      _mm512_mask_storeu_ps(s + t, k, p);
      vsum = _mm512_mask_add_ps(vsum, k, vsum, p);
    }
    l[h] = l[h] * corr + _mm512_reduce_add_ps(vsum);
    m[h] = mx;
    const __m512 vc = _mm512_set1_ps(corr);
    float* oh = o + int64_t(h) * hd;
    for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(oh + d, _mm512_mul_ps(_mm512_loadu_ps(oh + d), vc));
  }
}

// o tile of H heads × 16·V dims += P · v
template <int H, int V, typename T>
inline void pv_tile(const float* P, int ld, int n_keys, const T* v, int hd, int d0, float* o, Prefetch& pf) {
  __m512 acc[H][V];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < V; ++j) acc[h][j] = _mm512_loadu_ps(o + int64_t(h) * hd + d0 + 16 * j);
  for (int t = 0; t < n_keys; ++t) {
    pf.step();
    __m512 vv[V];
    for (int j = 0; j < V; ++j) vv[j] = load16(v + int64_t(t) * hd + d0 + 16 * j);
    for (int h = 0; h < H; ++h) {
      const __m512 p = _mm512_set1_ps(P[int64_t(h) * ld + t]);
      for (int j = 0; j < V; ++j) acc[h][j] = _mm512_fmadd_ps(p, vv[j], acc[h][j]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < V; ++j) _mm512_storeu_ps(o + int64_t(h) * hd + d0 + 16 * j, acc[h][j]);
}

// H heads × all dims: 64-dim tiles, then one tile of the 16, 32 or 48 left (narrow heads and
// the last heads of a group get as many independent FMA chains as the shape allows).
template <int H, typename T>
void pv_heads(const float* P, int ld, int n_keys, const T* v, int hd, float* o, Prefetch& pf) {
  int d = 0;
  for (; d + 64 <= hd; d += 64) pv_tile<H, 4>(P, ld, n_keys, v, hd, d, o, pf);
  if (hd - d == 48) pv_tile<H, 3>(P, ld, n_keys, v, hd, d, o, pf);
  else if (hd - d == 32) pv_tile<H, 2>(P, ld, n_keys, v, hd, d, o, pf);
  else if (hd - d == 16) pv_tile<H, 1>(P, ld, n_keys, v, hd, d, o, pf);
}

template <typename T>
void pv_avx512(const float* P, int heads, int ld, int n_keys, const T* v, int hd, float* o, const void* pf_region,
               size_t pf_bytes) {
  // n_keys steps per (head tile, dim tile)
  Prefetch pf(pf_region, pf_bytes, int64_t(n_keys) * ((heads + 3) / 4) * ((hd + 63) / 64));
  int h = 0;
  for (; h + 4 <= heads; h += 4) pv_heads<4>(P + int64_t(h) * ld, ld, n_keys, v, hd, o + int64_t(h) * hd, pf);
  if (heads - h == 3) pv_heads<3>(P + int64_t(h) * ld, ld, n_keys, v, hd, o + int64_t(h) * hd, pf);
  else if (heads - h == 2) pv_heads<2>(P + int64_t(h) * ld, ld, n_keys, v, hd, o + int64_t(h) * hd, pf);
  else if (heads - h == 1) pv_heads<1>(P + int64_t(h) * ld, ld, n_keys, v, hd, o + int64_t(h) * hd, pf);
}

void softmax_entry(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int head_dim) {
  if (head_dim % 16 != 0)
    return generic_attention_kernels().softmax_block_update(S, heads, ld, n_keys, m, l, o, head_dim);
  softmax_update_avx512(S, heads, ld, n_keys, m, l, o, head_dim);
}

template <typename T>
void pv_entry(const float* P, int heads, int ld, int n_keys, const T* v, int head_dim, float* o, const void* pf,
              size_t pf_bytes) {
  if (head_dim % 16 == 0) return pv_avx512(P, heads, ld, n_keys, v, head_dim, o, pf, pf_bytes);
  if constexpr (std::is_same_v<T, float>)
    generic_attention_kernels().pv_f32(P, heads, ld, n_keys, v, head_dim, o, pf, pf_bytes);
  else
    generic_attention_kernels().pv_bf16(P, heads, ld, n_keys, v, head_dim, o, pf, pf_bytes);
}

constexpr AttentionKernels kAvx512{"avx512",
                                   &qk_scores_avx512<float>,
                                   &qk_scores_avx512<uint16_t>,
                                   &qk_block_max_avx512<float>,
                                   &qk_block_max_avx512<uint16_t>,
                                   &softmax_entry,
                                   &pv_entry<float>,
                                   &pv_entry<uint16_t>};

}  // namespace

const AttentionKernels* avx512_attention_kernels() { return &kAvx512; }

}  // namespace m3

#else

namespace m3 {
const AttentionKernels* avx512_attention_kernels() { return nullptr; }
}  // namespace m3

#endif
