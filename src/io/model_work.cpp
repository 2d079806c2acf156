// Work per forward pass (io/model_work.h): sums over the tensor schema, the same list the loader
// binds, and closed forms over positions for the attention.
#include "io/model_work.h"

#include <algorithm>
#include <functional>

#include "io/safetensors.h"
#include "io/tensor_schema.h"
#include "io/weight_binding.h"

namespace m3 {

uint64_t msa_keys(uint64_t p, uint64_t block, uint64_t topk) {
  const uint64_t visible_blocks = p / block + 1;
  if (visible_blocks <= topk) return p + 1;
  return (topk - 1) * block + (p % block + 1);
}

uint64_t msa_pairs(uint64_t n, uint64_t block, uint64_t topk) {
  uint64_t sum = 0;
  for (uint64_t start = 0; start < n; start += block) {
    const uint64_t len = std::min(block, n - start);  // queries in this block
    const uint64_t base = (start / block + 1 <= topk) ? start : (topk - 1) * block;
    sum += len * base + len * (len + 1) / 2;
  }
  return sum;
}

namespace {

// Sorts every text linear of the schema into its group, with `size` giving its (params, bytes).
LinearSizes sort_linears(const ModelConfig& cfg, const std::function<LinearGroup(const TensorSpec&)>& size) {
  const TextConfig& t = cfg.text;
  LinearSizes out;
  LinearGroup experts, embedding;
  for (const TensorSpec& spec : text_tensor_schema(t)) {
    if (spec.role == TensorRole::Embedding) {
      embedding = size(spec);
      continue;
    }
    if (spec.storage != TensorStorage::Linear) continue;
    const LinearGroup g = size(spec);
    LinearGroup& into = spec.role == TensorRole::LmHead ? out.lm_head : spec.expert >= 0 ? experts : out.every_token;
    into.params += g.params;
    into.bytes += g.bytes;
  }
  if (t.tie_word_embeddings) out.lm_head = embedding;
  uint64_t moe_layers = 0;
  for (int l = 0; l < t.num_hidden_layers; ++l) moe_layers += t.is_moe_layer(l);
  const uint64_t n_experts = moe_layers * uint64_t(t.num_local_experts);
  if (n_experts > 0) out.per_expert = {experts.params / n_experts, experts.bytes / n_experts};
  return out;
}

// Sum of (p + 1) over depth <= p < depth + rows: the keys every row sees.
double visible_keys(uint64_t depth, uint64_t rows) {
  const double a = double(depth) + 1, b = double(depth + rows);
  return (a + b) * double(rows) / 2;
}

}  // namespace

LinearSizes linear_sizes(const ModelConfig& cfg) {
  return sort_linears(cfg, [](const TensorSpec& spec) {
    const uint64_t n = uint64_t(spec.numel());
    return LinearGroup{n, n * dtype_size(spec.release_dtype)};
  });
}

LinearSizes linear_sizes(const TensorStore& store, const ModelConfig& cfg) {
  const QuantizationConfig* q = cfg.quantization ? &*cfg.quantization : nullptr;
  return sort_linears(cfg, [&](const TensorSpec& spec) {
    const LinearWeight w = bind_linear(store, spec, q);
    return LinearGroup{uint64_t(w.rows * w.cols), w.stored_bytes()};
  });
}

ForwardWork forward_work(const ModelConfig& cfg, const LinearSizes& linears, uint64_t depth, uint64_t rows,
                         DType cache_type) {
  const TextConfig& t = cfg.text;
  const SparseAttentionConfig& s = t.sparse;
  ForwardWork w;
  if (rows == 0) return w;
  uint64_t moe_layers = 0, sparse_layers = 0;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    moe_layers += t.is_moe_layer(l);
    sparse_layers += t.is_sparse_layer(l);
  }
  const uint64_t dense_layers = uint64_t(t.num_hidden_layers) - sparse_layers;
  const double k = t.num_experts_per_tok, E = t.num_local_experts;

  // Linears: every row through the shared ones and its top-k experts; the last row through lm_head.
  const double expert_params = double(moe_layers) * k * double(linears.per_expert.params);
  w.linear_flops = 2 * (double(rows) * (double(linears.every_token.params) + expert_params) +
                        double(linears.lm_head.params));
  const double distinct_experts = std::min(E, double(rows) * k);  // per MoE layer, at most
  w.weight_bytes = double(linears.every_token.bytes) +
                   double(moe_layers) * distinct_experts * double(linears.per_expert.bytes) +
                   double(linears.lm_head.bytes);

  // Attention: q.k and p.v, 2 FLOPs each per query head, key and dimension.
  const double head_work = 4.0 * t.num_attention_heads * t.head_dim;
  const double all_keys = visible_keys(depth, rows);
  double sparse_keys = 0;
  if (sparse_layers > 0) {
    const uint64_t B = uint64_t(s.sparse_block_size), K = uint64_t(s.sparse_topk_blocks);
    sparse_keys = double(msa_pairs(depth + rows, B, K) - msa_pairs(depth, B, K));
  }
  w.attention_flops = head_work * (double(dense_layers) * all_keys + double(sparse_layers) * sparse_keys);
  w.index_flops = 2.0 * s.sparse_num_index_heads * s.sparse_index_dim * double(sparse_layers) * all_keys;

  // Cache reads: K and V of each KV head over the keys attended, index keys over every visible one.
  // fp8 stores one scale byte beside each vector.
  const double elem = double(dtype_size(cache_type)), scale = cache_type == DType::F8_E4M3 ? 1 : 0;
  const double kv_per_key = 2.0 * t.num_key_value_heads * (t.head_dim * elem + scale);
  const double index_per_key = s.sparse_index_dim * elem + scale;
  w.cache_bytes = kv_per_key * (double(dense_layers) * all_keys + double(sparse_layers) * sparse_keys) +
                  index_per_key * double(sparse_layers) * all_keys;
  return w;
}

}  // namespace m3
