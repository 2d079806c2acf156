#pragma once
// The builders one decoder layer is made of (spec §3.3–§3.6, §4). Each is a free function over
// row-major fp32 activations; shapes in comments are (rows, features).
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "io/model_config.h"
#include "kernels/rope.h"
#include "memory/kv_cache.h"
#include "memory/workspace.h"
#include "model/text_weights.h"

namespace m3 {

// One sequence's run of consecutive tokens inside a forward pass: rows row0 .. row0+rows-1 of the
// activations are its tokens at positions first_pos .. first_pos+rows-1 of `cache`.
struct SequenceRun {
  KvCache* cache = nullptr;
  int64_t row0 = 0;
  int64_t rows = 0;
  int64_t first_pos = 0;
};

// What one forward pass shares across layers. The rows of several sequences may be stacked
// (continuous batching): projections, norms and MLP/MoE see all rows at once, attention runs per
// sequence against its own cache.
struct ForwardContext {
  ThreadPool& pool;
  const TextConfig& cfg;
  const RopeTable& rope;  // built for every row's position, in row order
  const std::vector<SequenceRun>& runs;  // in row order, covering all rows
  int64_t rows = 0;
  Workspace& ws;          // the pass's scratch buffers (the caller's, reused from pass to pass)
};

// Attention of every run (dense GQA or MSA, by the layer's weights). Writes each run's K/V (and
// index keys) into its cache first, so rows attend to earlier rows.
// h (rows, hidden) -> out (rows, hidden)
void attention_forward(const ForwardContext& ctx, int layer, const AttentionWeights& w, const float* h, float* out);

// SwiGLU-OAI MLP on all rows. x (rows, hidden) -> out (rows, hidden)
void mlp_forward(const ForwardContext& ctx, const MlpWeights& w, const float* x, float* out);

// Routed experts + shared expert (spec §3.5). x (rows, hidden) -> out (rows, hidden)
void moe_forward(const ForwardContext& ctx, const MoeWeights& w, const float* x, float* out);

// Router decision for one token: the top-k experts by sigmoid(r) + bias (ties: smaller id) and their
// weights s_e / Σ s · routed_scaling_factor. logits (experts) -> ids (k), weights (k)
void moe_route(const float* router_logits, const std::vector<float>& bias, int experts, int top_k,
               double routed_scaling_factor, int32_t* ids, float* weights);

}  // namespace m3
