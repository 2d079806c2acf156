#pragma once
// The attention kernels as a table per CPU path (base/cpu_dispatch.h): attention_kernels.cpp holds
// the generic table and picks the active one; attention_kernels_avx512.cpp, compiled for AVX-512,
// provides its own (nullptr when the build has no x86 code). uint16_t K/V: bf16 bit patterns,
// widened to fp32 on load.
#include <cstddef>
#include <cstdint>

namespace m3 {

struct AttentionKernels {
  const char* name;
  void (*qk_scores_f32)(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* S,
                        int ld, const void* prefetch, size_t prefetch_bytes);
  void (*qk_scores_bf16)(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys, float* S,
                         int ld, const void* prefetch, size_t prefetch_bytes);
  void (*qk_block_max_f32)(const float* q, int nq, int dim, const float* kT, int kt_stride, int n_keys, float* out,
                           const void* prefetch, size_t prefetch_bytes);
  void (*qk_block_max_bf16)(const float* q, int nq, int dim, const uint16_t* kT, int kt_stride, int n_keys,
                            float* out, const void* prefetch, size_t prefetch_bytes);
  void (*softmax_block_update)(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int head_dim);
  void (*pv_f32)(const float* P, int heads, int ld, int n_keys, const float* v, int head_dim, float* o,
                 const void* prefetch, size_t prefetch_bytes);
  void (*pv_bf16)(const float* P, int heads, int ld, int n_keys, const uint16_t* v, int head_dim, float* o,
                  const void* prefetch, size_t prefetch_bytes);
};

const AttentionKernels& generic_attention_kernels();
// The AVX-512 table: its softmax and P.V entries run the generic code when head_dim % 16 != 0.
const AttentionKernels* avx512_attention_kernels();

}  // namespace m3
