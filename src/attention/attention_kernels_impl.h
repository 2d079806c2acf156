#pragma once
// Entry points of the AVX-512 translation unit (attention_kernels_avx512.cpp); call only after
// checking the CPU (attention_kernels.cpp does). Dims must be multiples of 16 for softmax/pv.
// uint16_t K/V: bf16 bit patterns, widened to fp32 on load.
#include <cstddef>
#include <cstdint>

namespace m3::avx512 {

void qk_scores(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch, size_t prefetch_bytes);
void qk_scores(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* S, int ld,
               const void* prefetch, size_t prefetch_bytes);
void qk_block_max(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch, size_t prefetch_bytes);
void qk_block_max(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* out,
                  const void* prefetch, size_t prefetch_bytes);
void softmax_block_update(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int head_dim);
void pv_accumulate(const float* P, int heads, int ld, int n_keys, const float* v, int head_dim, float* o,
                   const void* prefetch, size_t prefetch_bytes);
void pv_accumulate(const float* P, int heads, int ld, int n_keys, const uint16_t* v, int head_dim, float* o,
                   const void* prefetch, size_t prefetch_bytes);

}  // namespace m3::avx512
