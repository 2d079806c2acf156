#pragma once
// Attention of a run of consecutive query rows over the paged cache: MSA (per-row, per-KV-group
// block selection, spec §4) or dense causal attention (the oracle, and layers without an index
// branch). The run's own K/V and index keys must already be in the cache.
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "memory/kv_cache.h"
#include "memory/workspace.h"

namespace m3 {

struct AttentionRun {
  const float* q = nullptr;   // (rows, q_heads, head_dim), normed + RoPE'd
  const float* iq = nullptr;  // (rows, kv_heads, index_dim), normed + RoPE'd; MSA only
  int64_t first_pos = 0;
  int64_t rows = 0;
  int q_heads = 0, kv_heads = 0, head_dim = 0, index_dim = 0;
  int topk = 16;
  // A single row (a decode step) with more threads than KV groups splits each group's blocks across
  // threads and merges by log-sum-exp; false keeps one task per group (benchmarks compare both).
  bool split_decode = true;
};

// Selected blocks of every (row, group): count[r·G+g] entries at blocks[(r·G+g)·topk ...],
// ascending non-local picks then the local block (spec §4.4, ties to the smaller id).
struct BlockSelection {
  int topk = 0;
  std::vector<int32_t> blocks;
  std::vector<int32_t> count;
};

// Index branch for a run: block max scores of every row and group against every earlier block,
// computed block-major (each index-K page read once per run, the T×N score matrix never stored),
// then the top-(k-1) + local selection. The score buffer comes from `ws` when given (a forward
// pass's workspace), else it is allocated for the call.
void msa_select_run(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run, BlockSelection& sel,
                    Workspace* ws = nullptr);

// out (rows, q_heads, head_dim). sel == nullptr: dense causal attention over every block.
void attention_run(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run,
                   const BlockSelection* sel, float* out);

}  // namespace m3
