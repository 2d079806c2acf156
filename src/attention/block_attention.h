#pragma once
// Softmax attention of one query head over a list of KV blocks, with the causal bound t <= p.
// Dense attention is the same call with every block 0..p/block_size: one code path, so dense
// layers, MSA layers below topk visible blocks and the dense oracle agree by construction.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace m3 {

// q (head_dim); k_block(b), v_block(b) -> [block_size, head_dim]; out (head_dim).
// Online softmax over blocks in the given order; fp32 with a running max.
template <typename KFn, typename VFn>
void attend_blocks(const float* q, int head_dim, int block_size, int64_t pos, const std::vector<int32_t>& blocks,
                   float scale, KFn k_block, VFn v_block, float* scores_scratch, float* out);

template <typename KFn, typename VFn>
void attend_blocks(const float* q, int head_dim, int block_size, int64_t pos, const std::vector<int32_t>& blocks,
                   float scale, KFn k_block, VFn v_block, float* scores, float* out) {
  float running_max = -INFINITY, denom = 0.0f;
  for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int32_t b : blocks) {
    const int64_t first = int64_t(b) * block_size;
    const int n = int(std::min<int64_t>(block_size, pos + 1 - first));  // causal: t <= pos
    if (n <= 0) continue;
    const float* kb = k_block(b);
    const float* vb = v_block(b);
    float block_max = -INFINITY;
    for (int t = 0; t < n; ++t) {
      scores[t] = dot_f32(q, kb + int64_t(t) * head_dim, head_dim) * scale;
      block_max = std::max(block_max, scores[t]);
    }
    const float new_max = std::max(running_max, block_max);
    const float correction = std::exp(running_max - new_max);  // 0 on the first block
    denom *= correction;
    for (int d = 0; d < head_dim; ++d) out[d] *= correction;
    for (int t = 0; t < n; ++t) {
      const float w = std::exp(scores[t] - new_max);
      denom += w;
      const float* vt = vb + int64_t(t) * head_dim;
      for (int d = 0; d < head_dim; ++d) out[d] += w * vt[d];
    }
    running_max = new_max;
  }
  const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
  for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace m3
