#include "attention/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/attention_kernels_impl.h"
#include "base/cpu_dispatch.h"
#include "m3/dtype.h"

namespace m3 {

namespace {

// ---------------------------------------------------------------- plain paths
// Templated on the stored K/V element: float, or uint16_t bf16 bits widened exactly on load.

inline float widen(float x) { return x; }
inline float widen(uint16_t h) { return bf16_to_f32(h); }
// E4M3 through a table of the 256 codes (f8e4m3_to_f32 uses ldexp).
inline float widen(uint8_t b) {
  static const struct Table {
    float v[256];
    Table() {
      for (int i = 0; i < 256; ++i) v[i] = f8e4m3_to_f32(uint8_t(i));
    }
  } table;
  return table.v[b];
}

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

// With scales (an fp8 cache), key t's score is multiplied by 2^(scales[t] - 127) before the max.
template <typename T>
void qk_block_max_generic(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out,
                          const uint8_t* scales = nullptr) {
  float s[256];
  for (int i = 0; i < nq; ++i) {
    float best = -INFINITY;
    for (int t0 = 0; t0 < n_keys; t0 += 256) {
      const int n = std::min(256, n_keys - t0);
      qk_scores_generic(q + int64_t(i) * dim, 1, dim, kT + t0, kt_stride, n, s, 256);
      for (int t = 0; t < n; ++t) best = std::max(best, scales ? s[t] * ue8m0_to_f32(scales[t0 + t]) : s[t]);
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

// The plain paths ignore the prefetch hint (they are the reference, not tuned for DRAM).
template <typename T>
void qk_scores_entry(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* S, int ld,
                     const void*, size_t) {
  qk_scores_generic(q, nq, dim, kT, kt_stride, n_keys, S, ld);
}
template <typename T>
void qk_block_max_entry(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out,
                        const void*, size_t) {
  qk_block_max_generic(q, nq, dim, kT, kt_stride, n_keys, out);
}
template <typename T>
void pv_entry(const float* P, int heads, int ld, int n_keys, const T* v, int head_dim, float* o, const void*, size_t) {
  pv_generic(P, heads, ld, n_keys, v, head_dim, o);
}

void qk_scores_fp8_entry(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride,
                         int n_keys, float* S, int ld, const void*, size_t) {
  qk_scores_generic(q, nq, dim, kT, kt_stride, n_keys, S, ld);
  for (int i = 0; i < nq; ++i)
    for (int t = 0; t < n_keys; ++t) S[int64_t(i) * ld + t] *= ue8m0_to_f32(scales[t]);
}
void qk_block_max_fp8_entry(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride,
                            int n_keys, float* out, const void*, size_t) {
  qk_block_max_generic(q, nq, dim, kT, kt_stride, n_keys, out, scales);
}

// Each value row's scale goes into its column of P: p x (v x 2^e) = (p x 2^e) x v exactly.
void pv_fp8_entry(const float* P, int heads, int ld, int n_keys, const uint8_t* v, const uint8_t* v_scales, int hd,
                  float* o, const void*, size_t) {
  std::vector<float> scaled(size_t(heads) * size_t(std::max(n_keys, 1)));
  for (int h = 0; h < heads; ++h)
    for (int t = 0; t < n_keys; ++t) scaled[size_t(h) * n_keys + t] = P[int64_t(h) * ld + t] * ue8m0_to_f32(v_scales[t]);
  pv_generic(scaled.data(), heads, n_keys, n_keys, v, hd, o);
}

// A step's pages: the plain call per page, into the page's columns of S (q·k) or continuing each
// output's chain over the keys (P·V).
template <typename T>
void qk_scores_paged_generic(const float* q, int nq, int dim, const T* const* kT, int B, int n_keys, float* S, int ld) {
  for (int p = 0; p * B < n_keys; ++p) qk_scores_generic(q, nq, dim, kT[p], B, std::min(B, n_keys - p * B), S + p * B, ld);
}
void qk_scores_paged_fp8_generic(const float* q, int nq, int dim, const uint8_t* const* kT, const uint8_t* const* scales,
                                 int B, int n_keys, float* S, int ld) {
  for (int p = 0; p * B < n_keys; ++p)
    qk_scores_fp8_entry(q, nq, dim, kT[p], scales[p], B, std::min(B, n_keys - p * B), S + p * B, ld, nullptr, 0);
}
template <typename T>
void pv_paged_generic(const float* P, int heads, int ld, int n_keys, const T* const* v, int B, int hd, float* o) {
  for (int p = 0; p * B < n_keys; ++p) pv_generic(P + p * B, heads, ld, std::min(B, n_keys - p * B), v[p], hd, o);
}
void pv_paged_fp8_generic(const float* P, int heads, int ld, int n_keys, const uint8_t* const* v,
                          const uint8_t* const* scales, int B, int hd, float* o) {
  for (int p = 0; p * B < n_keys; ++p)
    pv_fp8_entry(P + p * B, heads, ld, std::min(B, n_keys - p * B), v[p], scales[p], hd, o, nullptr, 0);
}

template <typename T>
void qk_block_max_paged_generic(const float* q, int nq, int dim, const T* const* kT, int n_pages, int B, float* out,
                                int out_stride) {
  for (int p = 0; p < n_pages; ++p) qk_block_max_generic(q, nq, dim, kT[p], B, B, out + int64_t(p) * out_stride);
}
void qk_block_max_paged_fp8_generic(const float* q, int nq, int dim, const uint8_t* const* kT,
                                    const uint8_t* const* scales, int n_pages, int B, float* out, int out_stride) {
  for (int p = 0; p < n_pages; ++p) qk_block_max_generic(q, nq, dim, kT[p], B, B, out + int64_t(p) * out_stride, scales[p]);
}

constexpr AttentionKernels kGeneric{"generic",
                                    &qk_scores_entry<float>,
                                    &qk_scores_entry<uint16_t>,
                                    &qk_block_max_entry<float>,
                                    &qk_block_max_entry<uint16_t>,
                                    &softmax_update_generic,
                                    &pv_entry<float>,
                                    &pv_entry<uint16_t>,
                                    &qk_scores_fp8_entry,
                                    &qk_block_max_fp8_entry,
                                    &pv_fp8_entry,
                                    &qk_scores_paged_generic<float>,
                                    &qk_scores_paged_generic<uint16_t>,
                                    &qk_scores_paged_fp8_generic,
                                    &pv_paged_generic<float>,
                                    &pv_paged_generic<uint16_t>,
                                    &pv_paged_fp8_generic,
                                    &qk_block_max_paged_generic<float>,
                                    &qk_block_max_paged_generic<uint16_t>,
                                    &qk_block_max_paged_fp8_generic};

const PathTables<AttentionKernels>& tables() {
  static const PathTables<AttentionKernels> t{&kGeneric, simd_attention_kernels(CpuPath::Avx2),
                                              simd_attention_kernels(CpuPath::Avx512), simd_attention_kernels(CpuPath::Neon),
                                              simd_attention_kernels(CpuPath::Sve)};
  return t;
}

const AttentionKernels& active() {
  static const AttentionKernels& a = tables().active();
  return a;
}

}  // namespace

const AttentionKernels& generic_attention_kernels() { return kGeneric; }

const AttentionKernels& attention_kernels_for(CpuPath path) {
  M3_CHECK(cpu_path_supported(path), "attention: this CPU cannot run the ", cpu_path_name(path), " kernels");
  return tables().at(path);
}

const char* attention_kernel_name() { return active().name; }

void qk_scores(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch, size_t prefetch_bytes) {
  active().qk_scores_f32(q, nq, dim, kT, kt_stride, n_keys, S, ld, prefetch, prefetch_bytes);
}
void qk_scores(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch, size_t prefetch_bytes) {
  active().qk_scores_bf16(q, nq, dim, kT, kt_stride, n_keys, S, ld, prefetch, prefetch_bytes);
}

void qk_block_max(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch, size_t prefetch_bytes) {
  active().qk_block_max_f32(q, nq, dim, kT, kt_stride, n_keys, out, prefetch, prefetch_bytes);
}
void qk_block_max(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch, size_t prefetch_bytes) {
  active().qk_block_max_bf16(q, nq, dim, kT, kt_stride, n_keys, out, prefetch, prefetch_bytes);
}

void qk_scores(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* kT_scales, int kt_stride, int n_keys,
               float* S, int ld, const void* prefetch, size_t prefetch_bytes) {
  active().qk_scores_fp8(q, nq, dim, kT, kT_scales, kt_stride, n_keys, S, ld, prefetch, prefetch_bytes);
}
void qk_block_max(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* kT_scales, int kt_stride,
                  int n_keys, float* out, const void* prefetch, size_t prefetch_bytes) {
  active().qk_block_max_fp8(q, nq, dim, kT, kT_scales, kt_stride, n_keys, out, prefetch, prefetch_bytes);
}

void softmax_block_update(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int head_dim) {
  active().softmax_block_update(S, heads, ld, n_keys, m, l, o, head_dim);
}

void pv_accumulate(const float* P, int heads, int ld, int n_keys, const float* v, int head_dim, float* o,
                   const void* prefetch, size_t prefetch_bytes) {
  active().pv_f32(P, heads, ld, n_keys, v, head_dim, o, prefetch, prefetch_bytes);
}
void pv_accumulate(const float* P, int heads, int ld, int n_keys, const uint16_t* v, int head_dim, float* o,
                   const void* prefetch, size_t prefetch_bytes) {
  active().pv_bf16(P, heads, ld, n_keys, v, head_dim, o, prefetch, prefetch_bytes);
}

void pv_accumulate(const float* P, int heads, int ld, int n_keys, const uint8_t* v, const uint8_t* v_scales,
                   int head_dim, float* o, const void* prefetch, size_t prefetch_bytes) {
  active().pv_fp8(P, heads, ld, n_keys, v, v_scales, head_dim, o, prefetch, prefetch_bytes);
}

void qk_scores_paged(const float* q, int nq, int dim, const float* const* kT, int B, int n_keys, float* S, int ld) {
  active().qk_scores_paged_f32(q, nq, dim, kT, B, n_keys, S, ld);
}
void qk_scores_paged(const float* q, int nq, int dim, const uint16_t* const* kT, int B, int n_keys, float* S, int ld) {
  active().qk_scores_paged_bf16(q, nq, dim, kT, B, n_keys, S, ld);
}
void qk_scores_paged(const float* q, int nq, int dim, const uint8_t* const* kT, const uint8_t* const* kT_scales, int B,
                     int n_keys, float* S, int ld) {
  active().qk_scores_paged_fp8(q, nq, dim, kT, kT_scales, B, n_keys, S, ld);
}
void pv_accumulate_paged(const float* P, int heads, int ld, int n_keys, const float* const* v, int B, int head_dim,
                         float* o) {
  active().pv_paged_f32(P, heads, ld, n_keys, v, B, head_dim, o);
}
void pv_accumulate_paged(const float* P, int heads, int ld, int n_keys, const uint16_t* const* v, int B, int head_dim,
                         float* o) {
  active().pv_paged_bf16(P, heads, ld, n_keys, v, B, head_dim, o);
}
void pv_accumulate_paged(const float* P, int heads, int ld, int n_keys, const uint8_t* const* v,
                         const uint8_t* const* v_scales, int B, int head_dim, float* o) {
  active().pv_paged_fp8(P, heads, ld, n_keys, v, v_scales, B, head_dim, o);
}

void qk_block_max_paged(const float* q, int nq, int dim, const float* const* kT, int n_pages, int B, float* out,
                        int out_stride) {
  active().qk_block_max_paged_f32(q, nq, dim, kT, n_pages, B, out, out_stride);
}
void qk_block_max_paged(const float* q, int nq, int dim, const uint16_t* const* kT, int n_pages, int B, float* out,
                        int out_stride) {
  active().qk_block_max_paged_bf16(q, nq, dim, kT, n_pages, B, out, out_stride);
}
void qk_block_max_paged(const float* q, int nq, int dim, const uint8_t* const* kT, const uint8_t* const* kT_scales,
                        int n_pages, int B, float* out, int out_stride) {
  active().qk_block_max_paged_fp8(q, nq, dim, kT, kT_scales, n_pages, B, out, out_stride);
}

}  // namespace m3
