#include "attention/attention_kernels.h"
#include "attention/attention_kernels_impl.h"
#include "base/cpu_features.h"
#include "base/dtype.h"

#include <algorithm>
#include <cmath>

namespace m3 {

namespace {

// ---------------------------------------------------------------- plain paths
// Templated on the stored K/V element: float, or uint16_t bf16 bits widened exactly on load.

inline float widen(float x) { return x; }
inline float widen(uint16_t h) { return bf16_to_f32(h); }

template <typename T>
void qk_scores_generic(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* S, int ld) {
  for (int i = 0; i < nq; ++i) {
    float* s = S + int64_t(i) * ld;
    for (int t = 0; t < n_keys; ++t) s[t] = 0.0f;
    for (int d = 0; d < dim; ++d) {
      const float qd = q[int64_t(i) * dim + d];
      const T* k = kT + int64_t(d) * kt_stride;
      for (int t = 0; t < n_keys; ++t) s[t] += qd * widen(k[t]);
    }
  }
}

template <typename T>
void qk_block_max_generic(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out) {
  float s[256];
  for (int i = 0; i < nq; ++i) {
    float best = -INFINITY;
    for (int t0 = 0; t0 < n_keys; t0 += 256) {
      const int n = std::min(256, n_keys - t0);
      qk_scores_generic(q + int64_t(i) * dim, 1, dim, kT + t0, kt_stride, n, s, 256);
      for (int t = 0; t < n; ++t) best = std::max(best, s[t]);
    }
    out[i] = best;
  }
}

void softmax_update_generic(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int hd) {
  for (int h = 0; h < heads; ++h) {
    float* s = S + int64_t(h) * ld;
    float mx = m[h];
    for (int t = 0; t < n_keys; ++t) mx = std::max(mx, s[t]);
    const float corr = std::exp(m[h] - mx);  // m = -inf on the first block: corr = 0
    float sum = 0.0f;
    for (int t = 0; t < n_keys; ++t) sum += s[t] = std::exp(s[t] - mx);
    l[h] = l[h] * corr + sum;
    m[h] = mx;
    for (int d = 0; d < hd; ++d) o[int64_t(h) * hd + d] *= corr;
  }
}

template <typename T>
void pv_generic(const float* P, int heads, int ld, int n_keys, const T* v, int hd, float* o) {
  for (int h = 0; h < heads; ++h)
    for (int t = 0; t < n_keys; ++t) {
      const float p = P[int64_t(h) * ld + t];
      const T* vt = v + int64_t(t) * hd;
      float* oh = o + int64_t(h) * hd;
      for (int d = 0; d < hd; ++d) oh[d] += p * widen(vt[d]);
    }
}

bool use_avx512() { return cpu_active_path() == CpuPath::Avx512; }

template <typename T>
void qk_scores_any(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* S, int ld,
                   const void* pf, size_t pf_bytes) {
  if (use_avx512()) avx512::qk_scores(q, nq, dim, kT, kt_stride, n_keys, S, ld, pf, pf_bytes);
  else qk_scores_generic(q, nq, dim, kT, kt_stride, n_keys, S, ld);
}

template <typename T>
void qk_block_max_any(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out,
                      const void* pf, size_t pf_bytes) {
  if (use_avx512()) avx512::qk_block_max(q, nq, dim, kT, kt_stride, n_keys, out, pf, pf_bytes);
  else qk_block_max_generic(q, nq, dim, kT, kt_stride, n_keys, out);
}

template <typename T>
void pv_any(const float* P, int heads, int ld, int n_keys, const T* v, int head_dim, float* o, const void* pf,
            size_t pf_bytes) {
  if (use_avx512() && head_dim % 16 == 0) avx512::pv_accumulate(P, heads, ld, n_keys, v, head_dim, o, pf, pf_bytes);
  else pv_generic(P, heads, ld, n_keys, v, head_dim, o);
}

}  // namespace

const char* attention_kernel_name() { return use_avx512() ? "avx512" : "generic"; }

// The plain paths ignore the prefetch hint (they are the reference, not tuned for DRAM).
void qk_scores(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch, size_t prefetch_bytes) {
  qk_scores_any(q, nq, dim, kT, kt_stride, n_keys, S, ld, prefetch, prefetch_bytes);
}
void qk_scores(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch, size_t prefetch_bytes) {
  qk_scores_any(q, nq, dim, kT, kt_stride, n_keys, S, ld, prefetch, prefetch_bytes);
}

void qk_block_max(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch, size_t prefetch_bytes) {
  qk_block_max_any(q, nq, dim, kT, kt_stride, n_keys, out, prefetch, prefetch_bytes);
}
void qk_block_max(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch, size_t prefetch_bytes) {
  qk_block_max_any(q, nq, dim, kT, kt_stride, n_keys, out, prefetch, prefetch_bytes);
}

void softmax_block_update(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int head_dim) {
  if (use_avx512() && head_dim % 16 == 0) avx512::softmax_block_update(S, heads, ld, n_keys, m, l, o, head_dim);
  else softmax_update_generic(S, heads, ld, n_keys, m, l, o, head_dim);
}

void pv_accumulate(const float* P, int heads, int ld, int n_keys, const float* v, int head_dim, float* o,
                   const void* prefetch, size_t prefetch_bytes) {
  pv_any(P, heads, ld, n_keys, v, head_dim, o, prefetch, prefetch_bytes);
}
void pv_accumulate(const float* P, int heads, int ld, int n_keys, const uint16_t* v, int head_dim, float* o,
                   const void* prefetch, size_t prefetch_bytes) {
  pv_any(P, heads, ld, n_keys, v, head_dim, o, prefetch, prefetch_bytes);
}

}  // namespace m3
