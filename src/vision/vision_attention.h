#pragma once
// Multi-head self-attention of the vision tower (spec §5.4.3): full bidirectional attention within
// each segment (an image, or ≤ vision_segment_max_frames temporal groups of a video), scale
// head_dim^-1/2, fp32. Two implementations:
//   vision_attention_ref – plain: per (head, query row), scores, max-subtracted softmax, weighted sum;
//   vision_attention     – GEMM-shaped: per (head, tile of 64 query rows of one segment), key blocks
//                          of 128 with an online softmax, on the attention kernels of
//                          attention/attention_kernels.h (AVX-512 with a plain fallback);
//                          K is transposed per head once so 16 keys share a vector.
// The two agree to float rounding (the online softmax rescales; tests: vision_attention_test).
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "vision/vision_tower.h"

namespace m3::vision {

// q, k, v (rows, heads·head_dim), RoPE already applied; out (rows, heads·head_dim).
void vision_attention_ref(const float* q, const float* k, const float* v, int64_t rows, int heads, int head_dim,
                          const std::vector<Segment>& segments, float* out);
void vision_attention(ThreadPool& pool, const float* q, const float* k, const float* v, int64_t rows, int heads,
                      int head_dim, const std::vector<Segment>& segments, float* out);

}  // namespace m3::vision
