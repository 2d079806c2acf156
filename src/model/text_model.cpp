#include "model/text_model.h"

#include <algorithm>
#include <numeric>

#include "m3/error.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/layers.h"

namespace m3 {

TextModel::TextModel(const ModelConfig& cfg, const TensorStore& store, ThreadPool& pool)
    : cfg_(cfg.text), w_(bind_text_weights(store, cfg.text, cfg.quantization ? &*cfg.quantization : nullptr)), pool_(pool) {}

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
  forward_batch({BatchInput{&cache, tokens, nullptr, n, which, &logits}});
}

void TextModel::forward_embeddings(KvCache& cache, const float* x, int64_t n, LogitsFor which,
                                   std::vector<float>& logits) {
  forward_batch({BatchInput{&cache, nullptr, x, n, which, &logits}});
}

void TextModel::forward_batch(const std::vector<BatchInput>& inputs) { forward_batch(inputs, workspace_); }

void TextModel::forward_batch(const std::vector<BatchInput>& inputs, Workspace& ws) {
  using B = Workspace::Buffer;
  const int64_t H = cfg_.hidden_size;
  M3_CHECK(!inputs.empty(), "forward: empty batch");
  std::vector<SequenceRun> runs;
  int64_t R = 0;
  for (size_t b = 0; b < inputs.size(); ++b) {
    const BatchInput& in = inputs[b];
    M3_CHECK(in.cache != nullptr && in.n > 0, "forward: empty input for sequence ", b);
    M3_CHECK((in.tokens != nullptr) != (in.embeddings != nullptr), "forward: sequence ", b,
             " needs token ids or input embeddings (exactly one)");
    M3_CHECK(in.which == LogitsFor::None || in.logits != nullptr, "forward: sequence ", b, " has no logits buffer");
    for (size_t c = 0; c < b; ++c)
      M3_CHECK(inputs[c].cache != in.cache, "forward: sequences ", c, " and ", b, " share one cache");
    const int64_t first = in.cache->length();
    M3_CHECK(first + in.n <= cfg_.max_position_embeddings, "context of ", first + in.n,
             " tokens exceeds max_position_embeddings ", cfg_.max_position_embeddings);
    runs.push_back(SequenceRun{in.cache, R, in.n, first});
    R += in.n;
  }

  // x is the residual stream (R, H); h the normed input of each sub-block; y its output.
  float* x = ws.get<float>(B::Residual, size_t(R * H));
  float* h = ws.get<float>(B::Normed, size_t(R * H));
  float* y = ws.get<float>(B::SublayerOut, size_t(R * H));
  int64_t* positions = ws.get<int64_t>(B::Positions, size_t(R));
  for (size_t b = 0; b < inputs.size(); ++b) {
    const BatchInput& in = inputs[b];
    const SequenceRun& s = runs[b];
    float* xs = x + s.row0 * H;
    if (in.tokens) embed(in.tokens, in.n, xs);
    else std::copy(in.embeddings, in.embeddings + in.n * H, xs);
    std::iota(positions + s.row0, positions + s.row0 + s.rows, s.first_pos);
    in.cache->prepare_write(s.first_pos, s.first_pos + s.rows);
  }
  RopeTable rope(cfg_.rope_theta, cfg_.rotary_dim);
  rope.build(positions, R);
  ForwardContext ctx{pool_, cfg_, rope, runs, R, ws};

  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& lw = w_.layers[size_t(l)];
    gemma_rmsnorm(x, lw.input_norm_scale.data(), R, H, cfg_.rms_norm_eps, h);
    attention_forward(ctx, l, lw.attn, h, y);
    for (int64_t i = 0; i < R * H; ++i) x[i] += y[i];
    gemma_rmsnorm(x, lw.post_attention_norm_scale.data(), R, H, cfg_.rms_norm_eps, h);
    if (lw.is_moe) moe_forward(ctx, lw.moe, h, y);
    else mlp_forward(ctx, lw.mlp, h, y);
    for (int64_t i = 0; i < R * H; ++i) x[i] += y[i];
  }
  for (const SequenceRun& s : runs) s.cache->set_length(s.first_pos + s.rows);

  // Final norm and lm_head over the rows that want logits, in one GEMM.
  std::vector<int64_t> rows;
  for (size_t b = 0; b < inputs.size(); ++b) {
    const SequenceRun& s = runs[b];
    if (inputs[b].which == LogitsFor::Last) rows.push_back(s.row0 + s.rows - 1);
    if (inputs[b].which == LogitsFor::All)
      for (int64_t i = 0; i < s.rows; ++i) rows.push_back(s.row0 + i);
  }
  if (rows.empty()) return;
  const int64_t M = int64_t(rows.size()), V = cfg_.vocab_size;
  float* picked = ws.get<float>(B::FinalRows, size_t(M * H));
  for (int64_t i = 0; i < M; ++i) std::copy_n(x + rows[size_t(i)] * H, H, picked + i * H);
  gemma_rmsnorm(picked, w_.final_norm_scale.data(), M, H, cfg_.rms_norm_eps, h);
  float* all = ws.get<float>(B::Logits, size_t(M * V));
  matmul(pool_, h, M, w_.lm_head, all);
  int64_t at = 0;
  for (const BatchInput& in : inputs) {
    if (in.which == LogitsFor::None) continue;
    const int64_t m = in.which == LogitsFor::Last ? 1 : in.n;
    in.logits->assign(all + at * V, all + (at + m) * V);
    at += m;
  }
}

}  // namespace m3
