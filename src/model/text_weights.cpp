#include "model/text_weights.h"

#include "base/error.h"

namespace m3 {

namespace {

const std::string kPrefix = "language_model.";

struct Binder {
  const TensorStore& store;

  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const TensorView& t = store.get(name, {rows, cols});
    M3_CHECK(t.dtype == DType::BF16 || t.dtype == DType::F16 || t.dtype == DType::F32, store.source(), ": tensor ",
             name, " has dtype ", dtype_name(t.dtype), ", expected BF16, F16 or F32");
    return WeightMatrix{t.dtype, t.data, rows, cols};
  }

  std::vector<float> values(const std::string& name, int64_t n) const {
    const TensorView& t = store.get(name, {n});
    M3_CHECK(t.dtype == DType::BF16 || t.dtype == DType::F16 || t.dtype == DType::F32, store.source(), ": tensor ",
             name, " has dtype ", dtype_name(t.dtype), ", expected BF16, F16 or F32");
    std::vector<float> out(static_cast<size_t>(n));
    WeightMatrix{t.dtype, t.data, 1, n}.row_to_f32(0, out.data());
    return out;
  }

  // Gemma norms store w centred at 0 and scale by (1 + w) (spec §3.2).
  std::vector<float> norm_scale(const std::string& name, int64_t n) const {
    std::vector<float> w = values(name, n);
    for (float& x : w) x = 1.0f + x;
    return w;
  }

  MlpWeights mlp(const std::string& p, const char* gate, const char* up, const char* down, int64_t hidden,
                 int64_t width) const {
    return MlpWeights{matrix(p + gate + ".weight", width, hidden), matrix(p + up + ".weight", width, hidden),
                      matrix(p + down + ".weight", hidden, width)};
  }
};

}  // namespace

TextWeights bind_text_weights(const TensorStore& store, const TextConfig& cfg) {
  Binder b{store};
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, hd = cfg.head_dim;
  TextWeights w;
  w.embed = b.matrix(kPrefix + "model.embed_tokens.weight", V, H);
  w.lm_head = cfg.tie_word_embeddings ? w.embed : b.matrix(kPrefix + "lm_head.weight", V, H);
  w.final_norm_scale = b.norm_scale(kPrefix + "model.norm.weight", H);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = kPrefix + "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.input_norm_scale = b.norm_scale(p + "input_layernorm.weight", H);
    lw.post_attention_norm_scale = b.norm_scale(p + "post_attention_layernorm.weight", H);

    AttentionWeights& a = lw.attn;
    const std::string ap = p + "self_attn.";
    a.q = b.matrix(ap + "q_proj.weight", int64_t(cfg.num_attention_heads) * hd, H);
    a.k = b.matrix(ap + "k_proj.weight", int64_t(cfg.num_key_value_heads) * hd, H);
    a.v = b.matrix(ap + "v_proj.weight", int64_t(cfg.num_key_value_heads) * hd, H);
    a.o = b.matrix(ap + "o_proj.weight", H, int64_t(cfg.num_attention_heads) * hd);
    a.q_norm_scale = b.norm_scale(ap + "q_norm.weight", hd);
    a.k_norm_scale = b.norm_scale(ap + "k_norm.weight", hd);
    a.sparse = cfg.is_sparse_layer(l);
    if (a.sparse) {
      const int64_t id = cfg.sparse.sparse_index_dim;
      a.index_q = b.matrix(ap + "index_q_proj.weight", int64_t(cfg.sparse.sparse_num_index_heads) * id, H);
      a.index_k = b.matrix(ap + "index_k_proj.weight", id, H);
      a.index_q_norm_scale = b.norm_scale(ap + "index_q_norm.weight", id);
      a.index_k_norm_scale = b.norm_scale(ap + "index_k_norm.weight", id);
    }

    lw.is_moe = cfg.is_moe_layer(l);
    if (lw.is_moe) {
      const std::string mp = p + "block_sparse_moe.";
      const int64_t E = cfg.num_local_experts;
      lw.moe.router = b.matrix(mp + "gate.weight", E, H);
      lw.moe.routing_bias = b.values(mp + "e_score_correction_bias", E);
      for (int64_t e = 0; e < E; ++e)
        lw.moe.experts.push_back(
            b.mlp(mp + "experts." + std::to_string(e) + ".", "w1", "w3", "w2", H, cfg.intermediate_size));
      lw.moe.has_shared = cfg.n_shared_experts > 0;
      if (lw.moe.has_shared)
        lw.moe.shared = b.mlp(mp + "shared_experts.", "gate_proj", "up_proj", "down_proj", H,
                              int64_t(cfg.shared_intermediate_size) * cfg.n_shared_experts);
    } else {
      lw.mlp = b.mlp(p + "mlp.", "gate_proj", "up_proj", "down_proj", H, cfg.dense_intermediate_size);
    }
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace m3
