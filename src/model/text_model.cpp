#include "model/text_model.h"

#include <numeric>

#include "base/error.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/layers.h"

namespace m3 {

TextModel::TextModel(const ModelConfig& cfg, const TensorStore& store, ThreadPool& pool)
    : cfg_(cfg.text), w_(bind_text_weights(store, cfg.text)), pool_(pool) {}

KvCacheShape TextModel::cache_shape() const {
  KvCacheShape s;
  s.num_layers = cfg_.num_hidden_layers;
  s.block_size = cfg_.sparse.sparse_block_size;
  s.kv_heads = cfg_.num_key_value_heads;
  s.head_dim = cfg_.head_dim;
  s.index_dim = cfg_.sparse.sparse_index_dim;
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) s.layer_has_index.push_back(cfg_.is_sparse_layer(l));
  return s;
}

void TextModel::embed(const int32_t* tokens, int64_t n, float* x) const {
  for (int64_t i = 0; i < n; ++i) {
    M3_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "token id ", tokens[i], " at index ", i,
             " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
    w_.embed.row_to_f32(tokens[i], x + i * cfg_.hidden_size);
  }
}

void TextModel::forward(KvCache& cache, const int32_t* tokens, int64_t n, LogitsFor which,
                        std::vector<float>& logits) {
  std::vector<float> x(static_cast<size_t>(n * cfg_.hidden_size));
  embed(tokens, n, x.data());
  forward_embeddings(cache, x.data(), n, which, logits);
}

void TextModel::forward_embeddings(KvCache& cache, const float* x_in, int64_t n, LogitsFor which,
                                   std::vector<float>& logits) {
  const int64_t H = cfg_.hidden_size, first = cache.length();
  M3_CHECK(n > 0, "forward: empty input");
  M3_CHECK(first + n <= cfg_.max_position_embeddings, "context of ", first + n,
           " tokens exceeds max_position_embeddings ", cfg_.max_position_embeddings);
  cache.ensure_capacity(first + n);

  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), first);
  RopeTable rope(cfg_.rope_theta, cfg_.rotary_dim);
  rope.build(positions.data(), n);
  ForwardContext ctx{pool_, cfg_, rope, first, n};

  // x is the residual stream (n, H); h the normed input of each sub-block; y its output.
  std::vector<float> x(x_in, x_in + n * H), h(static_cast<size_t>(n * H)), y(static_cast<size_t>(n * H));
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& lw = w_.layers[size_t(l)];
    gemma_rmsnorm(x.data(), lw.input_norm_scale.data(), n, H, cfg_.rms_norm_eps, h.data());
    attention_forward(ctx, l, lw.attn, cache, h.data(), y.data());
    for (int64_t i = 0; i < n * H; ++i) x[size_t(i)] += y[size_t(i)];
    gemma_rmsnorm(x.data(), lw.post_attention_norm_scale.data(), n, H, cfg_.rms_norm_eps, h.data());
    if (lw.is_moe) moe_forward(ctx, lw.moe, h.data(), y.data());
    else mlp_forward(ctx, lw.mlp, h.data(), y.data());
    for (int64_t i = 0; i < n * H; ++i) x[size_t(i)] += y[size_t(i)];
  }
  cache.set_length(first + n);

  if (which == LogitsFor::None) return;
  const int64_t first_row = which == LogitsFor::Last ? n - 1 : 0;
  const int64_t rows = n - first_row;
  gemma_rmsnorm(x.data() + first_row * H, w_.final_norm_scale.data(), rows, H, cfg_.rms_norm_eps, h.data());
  logits.resize(static_cast<size_t>(rows * cfg_.vocab_size));
  matmul(pool_, h.data(), rows, w_.lm_head, logits.data());
}

}  // namespace m3
