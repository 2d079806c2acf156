#include "model/text_weights.h"

#include "m3/error.h"
#include "io/tensor_schema.h"
#include "io/weight_binding.h"

namespace m3 {

namespace {

struct Binder {
  const TensorStore& store;
  const QuantizationConfig* quantization;

  LinearWeight matrix(const TensorSpec& s) const { return bind_linear(store, s, quantization); }
  std::vector<float> values(const TensorSpec& s) const { return read_f32_vector(store, s); }

  // Gemma norms store w centred at 0 and scale by (1 + w) (spec §3.2).
  std::vector<float> norm_scale(const TensorSpec& s) const {
    std::vector<float> w = values(s);
    for (float& x : w) x = 1.0f + x;
    return w;
  }
};

}  // namespace

TextWeights bind_text_weights(const TensorStore& store, const TextConfig& cfg,
                              const QuantizationConfig* quantization) {
  using R = TensorRole;
  Binder b{store, quantization};
  TextWeights w;
  w.layers.resize(size_t(cfg.num_hidden_layers));
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    LayerWeights& lw = w.layers[size_t(l)];
    lw.attn.sparse = cfg.is_sparse_layer(l);
    lw.is_moe = cfg.is_moe_layer(l);
    if (lw.is_moe) {
      lw.moe.experts.resize(size_t(cfg.num_local_experts));
      lw.moe.has_shared = cfg.n_shared_experts > 0;
    }
  }
  // Every tensor of the schema lands in exactly one field.
  for (const TensorSpec& s : text_tensor_schema(cfg)) {
    LayerWeights* lw = s.layer >= 0 ? &w.layers[size_t(s.layer)] : nullptr;
    MlpWeights* expert = s.expert >= 0 ? &lw->moe.experts[size_t(s.expert)] : nullptr;
    switch (s.role) {
      case R::Embedding: w.embed = b.matrix(s); break;
      case R::LmHead: w.lm_head = b.matrix(s); break;
      case R::FinalNorm: w.final_norm_scale = b.norm_scale(s); break;
      case R::InputNorm: lw->input_norm_scale = b.norm_scale(s); break;
      case R::PostAttentionNorm: lw->post_attention_norm_scale = b.norm_scale(s); break;
      case R::QProj: lw->attn.q = b.matrix(s); break;
      case R::KProj: lw->attn.k = b.matrix(s); break;
      case R::VProj: lw->attn.v = b.matrix(s); break;
      case R::OProj: lw->attn.o = b.matrix(s); break;
      case R::QNorm: lw->attn.q_norm_scale = b.norm_scale(s); break;
      case R::KNorm: lw->attn.k_norm_scale = b.norm_scale(s); break;
      case R::IndexQProj: lw->attn.index_q = b.matrix(s); break;
      case R::IndexKProj: lw->attn.index_k = b.matrix(s); break;
      case R::IndexQNorm: lw->attn.index_q_norm_scale = b.norm_scale(s); break;
      case R::IndexKNorm: lw->attn.index_k_norm_scale = b.norm_scale(s); break;
      case R::MlpGate: lw->mlp.gate = b.matrix(s); break;
      case R::MlpUp: lw->mlp.up = b.matrix(s); break;
      case R::MlpDown: lw->mlp.down = b.matrix(s); break;
      case R::RouterGate: lw->moe.router = b.matrix(s); break;
      case R::RoutingBias: lw->moe.routing_bias = b.values(s); break;
      case R::ExpertGate: expert->gate = b.matrix(s); break;
      case R::ExpertUp: expert->up = b.matrix(s); break;
      case R::ExpertDown: expert->down = b.matrix(s); break;
      case R::SharedGate: lw->moe.shared.gate = b.matrix(s); break;
      case R::SharedUp: lw->moe.shared.up = b.matrix(s); break;
      case R::SharedDown: lw->moe.shared.down = b.matrix(s); break;
      default: fail(s.name, ": ", tensor_role_name(s.role), " is not a text-tower tensor");
    }
  }
  if (cfg.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

}  // namespace m3
