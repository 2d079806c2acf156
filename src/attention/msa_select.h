#pragma once
// MSA block selection for one query token and one KV group (spec §4.2–§4.4).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace m3 {

// Block scores B(p, b) for b in [0, L): max over the block's keys of (iq · ik_t) · scale.
// Only blocks strictly before the local block are scored (the local block is always selected).
// iq (index_dim), index_k_block(b) -> [block_size, index_dim]; out (L)
template <typename BlockFn>
void msa_block_scores(const float* iq, int index_dim, int block_size, int64_t local_block, float scale,
                      BlockFn index_k_block, float* out);

// Picks the blocks a query at position p attends to, given the scores of blocks [0, L):
// if L + 1 <= topk, all of 0..L (dense); else the topk-1 best by score (ties: smaller block id
// first; NaN ranks as -1e30) followed by L. Output: ascending block ids of the non-local picks, then L.
void msa_select_blocks(const float* block_scores, int64_t local_block, int topk, std::vector<int32_t>& out);

// The plain rule written as directly as possible (full stable sort); tests compare against it.
void msa_select_blocks_ref(const float* block_scores, int64_t local_block, int topk, std::vector<int32_t>& out);

template <typename BlockFn>
void msa_block_scores(const float* iq, int index_dim, int block_size, int64_t local_block, float scale,
                      BlockFn index_k_block, float* out) {
  for (int64_t b = 0; b < local_block; ++b) {
    const float* kb = index_k_block(b);
    float best = -INFINITY;
    for (int t = 0; t < block_size; ++t) {
      const float s = dot_f32(iq, kb + int64_t(t) * index_dim, index_dim);
      if (s > best) best = s;
    }
    out[b] = best * scale;
  }
}

}  // namespace m3
