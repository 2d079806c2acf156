#pragma once
// The builders one decoder layer is made of (spec §3.3–§3.6, §4). Each is a free function over
// row-major fp32 activations; shapes in comments are (rows, features).
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "io/model_config.h"
#include "kernels/rope.h"
#include "model/text_weights.h"
#include "runtime/kv_cache.h"

namespace m3 {

// What one forward pass over a run of consecutive tokens shares across layers.
struct ForwardContext {
  ThreadPool& pool;
  const TextConfig& cfg;
  const RopeTable& rope;  // built for the run's positions
  int64_t first_pos = 0;  // absolute position of row 0
  int64_t rows = 0;
};

// Attention of a run of tokens at positions first_pos.. (dense GQA or MSA, by the layer's weights).
// Writes the run's K/V (and index keys) into the cache first, so rows attend to earlier rows.
// h (rows, hidden) -> out (rows, hidden)
void attention_forward(const ForwardContext& ctx, int layer, const AttentionWeights& w, KvCache& cache,
                       const float* h, float* out);

// SwiGLU-OAI MLP on all rows. x (rows, hidden) -> out (rows, hidden)
void mlp_forward(const ForwardContext& ctx, const MlpWeights& w, const float* x, float* out);

// Routed experts + shared expert (spec §3.5). x (rows, hidden) -> out (rows, hidden)
void moe_forward(const ForwardContext& ctx, const MoeWeights& w, const float* x, float* out);

// Router decision for one token: the top-k experts by sigmoid(r) + bias (ties: smaller id) and their
// weights s_e / Σ s · routed_scaling_factor. logits (experts) -> ids (k), weights (k)
void moe_route(const float* router_logits, const std::vector<float>& bias, int experts, int top_k,
               double routed_scaling_factor, int32_t* ids, float* weights);

}  // namespace m3
