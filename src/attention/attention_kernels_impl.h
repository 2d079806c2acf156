#pragma once
// The attention kernels as a table per CPU path (base/cpu_dispatch.h): attention_kernels.cpp holds
// the generic table (plain C++, the reference) and picks the active one; attention_kernels_simd.cpp
// provides avx2, avx512, neon and sve from one Highway source. uint16_t K/V: bf16 bit patterns,
// uint8_t: E4M3 bytes with UE8M0 scales, widened to fp32 on load.
#include <cstddef>
#include <cstdint>

#include "base/cpu_features.h"

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
  // An fp8 cache: E4M3 bytes, one UE8M0 scale per key (per column of kT) multiplying its score,
  // and per value row multiplying its weight.
  void (*qk_scores_fp8)(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride,
                        int n_keys, float* S, int ld, const void* prefetch, size_t prefetch_bytes);
  void (*qk_block_max_fp8)(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride,
                           int n_keys, float* out, const void* prefetch, size_t prefetch_bytes);
  void (*pv_fp8)(const float* P, int heads, int ld, int n_keys, const uint8_t* v, const uint8_t* v_scales,
                 int head_dim, float* o, const void* prefetch, size_t prefetch_bytes);
  // A softmax step's blocks, each page in its own place (attention_kernels.h, *_paged).
  void (*qk_scores_paged_f32)(const float* q, int nq, int dim, const float* const* kT, int B, int n_keys, float* S,
                              int ld);
  void (*qk_scores_paged_bf16)(const float* q, int nq, int dim, const uint16_t* const* kT, int B, int n_keys,
                               float* S, int ld);
  void (*qk_scores_paged_fp8)(const float* q, int nq, int dim, const uint8_t* const* kT,
                              const uint8_t* const* kT_scales, int B, int n_keys, float* S, int ld);
  void (*pv_paged_f32)(const float* P, int heads, int ld, int n_keys, const float* const* v, int B, int head_dim,
                       float* o);
  void (*pv_paged_bf16)(const float* P, int heads, int ld, int n_keys, const uint16_t* const* v, int B, int head_dim,
                        float* o);
  void (*pv_paged_fp8)(const float* P, int heads, int ld, int n_keys, const uint8_t* const* v,
                       const uint8_t* const* v_scales, int B, int head_dim, float* o);
  void (*qk_block_max_paged_f32)(const float* q, int nq, int dim, const float* const* kT, int n_pages, int B,
                                 float* out, int out_stride);
  void (*qk_block_max_paged_bf16)(const float* q, int nq, int dim, const uint16_t* const* kT, int n_pages, int B,
                                  float* out, int out_stride);
  void (*qk_block_max_paged_fp8)(const float* q, int nq, int dim, const uint8_t* const* kT,
                                 const uint8_t* const* kT_scales, int n_pages, int B, float* out, int out_stride);
};

const AttentionKernels& generic_attention_kernels();
// The Highway tables (attention_kernels_simd.cpp) of avx2, avx512, neon and sve; nullptr for a
// path the build's architecture has none for.
const AttentionKernels* simd_attention_kernels(CpuPath path);
// The table `path` runs (the best at or below it); the CPU must support `path`.
const AttentionKernels& attention_kernels_for(CpuPath path);

}  // namespace m3
