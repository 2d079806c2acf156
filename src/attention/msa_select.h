#pragma once
// MSA block selection for one query token and one KV group (spec §4.2–§4.4).
#include <cstdint>
#include <vector>

namespace m3 {

// Picks the blocks a query at position p attends to, given the scores of blocks [0, L):
// if L + 1 <= topk, all of 0..L (dense); else the topk-1 best by score (ties: smaller block id
// first; NaN ranks as -1e30) followed by L. Output: ascending block ids of the non-local picks, then L.
void msa_select_blocks(const float* block_scores, int64_t local_block, int topk, std::vector<int32_t>& out);

// The plain rule written as directly as possible (full stable sort); tests compare against it.
void msa_select_blocks_ref(const float* block_scores, int64_t local_block, int topk, std::vector<int32_t>& out);

}  // namespace m3
