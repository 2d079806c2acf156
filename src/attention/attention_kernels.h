#pragma once
// The inner loops of MSA and dense attention over one KV block, with K stored transposed per block
// ([dim][block_size], so a vector holds one dimension of consecutive keys) and V natural
// ([block_size][head_dim]). Each op has SIMD paths (avx2, avx512, neon, sve: one Highway source,
// any head size, the same bits on all of them) chosen at run time and a plain path; tests compare
// every path the machine runs against naive formulas. The K and V arguments come in two
// element types: fp32, bf16 (uint16_t bit patterns, a bf16 KV cache) or E4M3 (uint8_t, an fp8 cache,
// with one UE8M0 power-of-two scale per key or value row) widened exactly to fp32 on load; all
// arithmetic is fp32, so a bf16 block gives the bits of its widened fp32 copy, and an fp8 block
// those of its dequantized copy (the scale multiplies each key's score, and each value row's
// weight, which for a power of two is the same as multiplying its elements), unless a product
// underflows past fp32's normal range.
#include <cstddef>
#include <cstdint>

namespace m3 {

// S[i][t] = q[i] · kT[:, t] for i < nq, t < n_keys; S row stride ld (>= n_keys).
// q (nq, dim), kT (dim, kt_stride)
// prefetch/prefetch_bytes (qk_scores, qk_block_max, pv_accumulate): a region the caller reads next (the next
// block's page), requested into L2 a few cache lines per inner-loop step, so that DRAM traffic
// overlaps the arithmetic instead of stalling it. A hint only; results never depend on it.
void qk_scores(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch = nullptr, size_t prefetch_bytes = 0);
void qk_scores(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch = nullptr, size_t prefetch_bytes = 0);
// kT_scales[t] (UE8M0) scales key t.
void qk_scores(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* kT_scales, int kt_stride, int n_keys,
               float* S, int ld, const void* prefetch = nullptr, size_t prefetch_bytes = 0);

// out[i] = max_t<n_keys S[i][t], computed without storing S (index branch block max).
void qk_block_max(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch = nullptr, size_t prefetch_bytes = 0);
void qk_block_max(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch = nullptr, size_t prefetch_bytes = 0);
void qk_block_max(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* kT_scales, int kt_stride,
                  int n_keys, float* out, const void* prefetch = nullptr, size_t prefetch_bytes = 0);

// Online softmax step for `heads` rows of scores over n_keys keys: updates the running max m and
// denominator l, rescales the accumulators o (heads, head_dim), and turns S into weights
// P = exp(S - m_new) in place. S (heads, ld)
void softmax_block_update(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int head_dim);

// o[h] += Σ_t P[h][t] · v[t] for t < n_keys. P (heads, ld), v (n_keys, head_dim), o (heads, head_dim)
void pv_accumulate(const float* P, int heads, int ld, int n_keys, const float* v, int head_dim, float* o,
                   const void* prefetch = nullptr, size_t prefetch_bytes = 0);
void pv_accumulate(const float* P, int heads, int ld, int n_keys, const uint16_t* v, int head_dim, float* o,
                   const void* prefetch = nullptr, size_t prefetch_bytes = 0);
// v_scales[t] (UE8M0) scales value row t.
void pv_accumulate(const float* P, int heads, int ld, int n_keys, const uint8_t* v, const uint8_t* v_scales,
                   int head_dim, float* o, const void* prefetch = nullptr, size_t prefetch_bytes = 0);

// One softmax step over several blocks read where the cache keeps them: kT[p] is the K page and
// v[p] the V page of the step's p-th block (scales: their fp8 scales), holding its keys
// [p·B, (p + 1)·B) of the step; every page holds B keys but the last, which holds the rest of
// n_keys. The scores, and the sums into o, are those of one block holding the keys in that order
// (each score one chain over the dims, each output one chain over the keys): a q·k tile can then
// take key vectors of several small blocks at once.
void qk_scores_paged(const float* q, int nq, int dim, const float* const* kT, int B, int n_keys, float* S, int ld);
void qk_scores_paged(const float* q, int nq, int dim, const uint16_t* const* kT, int B, int n_keys, float* S, int ld);
void qk_scores_paged(const float* q, int nq, int dim, const uint8_t* const* kT, const uint8_t* const* kT_scales, int B,
                     int n_keys, float* S, int ld);
void pv_accumulate_paged(const float* P, int heads, int ld, int n_keys, const float* const* v, int B, int head_dim,
                         float* o);
void pv_accumulate_paged(const float* P, int heads, int ld, int n_keys, const uint16_t* const* v, int B, int head_dim,
                         float* o);
void pv_accumulate_paged(const float* P, int heads, int ld, int n_keys, const uint8_t* const* v,
                         const uint8_t* const* v_scales, int B, int head_dim, float* o);

// The block maxima of n_pages whole blocks at once (the index branch): out[p·out_stride + i] =
// max_t q_i · kT[p][:, t] over the B keys of page p; the values of qk_block_max on each page.
void qk_block_max_paged(const float* q, int nq, int dim, const float* const* kT, int n_pages, int B, float* out,
                        int out_stride);
void qk_block_max_paged(const float* q, int nq, int dim, const uint16_t* const* kT, int n_pages, int B, float* out,
                        int out_stride);
void qk_block_max_paged(const float* q, int nq, int dim, const uint8_t* const* kT, const uint8_t* const* kT_scales,
                        int n_pages, int B, float* out, int out_stride);

// Which implementation runs ("avx512", "avx2", "sve", "neon" or "generic"); M3_CPU=generic forces the
// plain path.
const char* attention_kernel_name();

}  // namespace m3
