#include "io/tensor_schema.h"

#include <iterator>

#include "m3/error.h"

namespace m3 {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

struct SchemaBuilder {
  std::vector<TensorSpec> out;
  ModelPart part = ModelPart::Text;
  int layer = -1, expert = -1;

  void add(std::string name, std::vector<int64_t> shape, TensorRole role, TensorStorage storage,
           DType dtype = DType::BF16) {
    TensorSpec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.role = role;
    s.storage = storage;
    s.release_dtype = dtype;
    s.part = part;
    s.layer = layer;
    s.expert = expert;
    out.push_back(std::move(s));
  }
  void linear(std::string name, int64_t rows, int64_t cols, TensorRole role) {
    add(std::move(name), {rows, cols}, role, TensorStorage::Linear);
  }
  void vector(std::string name, int64_t n, TensorRole role, DType dtype = DType::BF16) {
    add(std::move(name), {n}, role, TensorStorage::Vector, dtype);
  }
  // A vision linear: "<prefix>.weight" [out, in] then "<prefix>.bias" [out].
  void linear_with_bias(const std::string& prefix, int64_t rows, int64_t cols, TensorRole role) {
    linear(prefix + ".weight", rows, cols, role);
    vector(prefix + ".bias", rows, role);
    out.back().bias = true;
  }
  // A CLIP LayerNorm: "<prefix>.weight" (used as stored) then "<prefix>.bias".
  void layer_norm(const std::string& prefix, int64_t n, TensorRole role) {
    vector(prefix + ".weight", n, role);
    vector(prefix + ".bias", n, role);
    out.back().bias = true;
  }
};

void add_text(const TextConfig& t, SchemaBuilder& b) {
  using R = TensorRole;
  const int64_t H = t.hidden_size, V = t.vocab_size, hd = t.head_dim;
  const int64_t q_width = int64_t(t.num_attention_heads) * hd, kv_width = int64_t(t.num_key_value_heads) * hd;
  const std::string p = "language_model.";
  b.add(p + "model.embed_tokens.weight", {V, H}, R::Embedding, TensorStorage::RowTable);
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    b.layer = l;
    const std::string lp = p + "model.layers." + std::to_string(l) + ".";
    b.vector(lp + "input_layernorm.weight", H, R::InputNorm);
    b.vector(lp + "post_attention_layernorm.weight", H, R::PostAttentionNorm);
    const std::string ap = lp + "self_attn.";
    b.linear(ap + "q_proj.weight", q_width, H, R::QProj);
    b.linear(ap + "k_proj.weight", kv_width, H, R::KProj);
    b.linear(ap + "v_proj.weight", kv_width, H, R::VProj);
    b.linear(ap + "o_proj.weight", H, q_width, R::OProj);
    b.vector(ap + "q_norm.weight", hd, R::QNorm);
    b.vector(ap + "k_norm.weight", hd, R::KNorm);
    if (t.is_sparse_layer(l)) {
      const int64_t id = t.sparse.sparse_index_dim;
      b.linear(ap + "index_q_proj.weight", int64_t(t.sparse.sparse_num_index_heads) * id, H, R::IndexQProj);
      b.linear(ap + "index_k_proj.weight", id, H, R::IndexKProj);
      b.vector(ap + "index_q_norm.weight", id, R::IndexQNorm);
      b.vector(ap + "index_k_norm.weight", id, R::IndexKNorm);
    }
    if (t.is_moe_layer(l)) {
      const std::string mp = lp + "block_sparse_moe.";
      const int64_t E = t.num_local_experts, I = t.intermediate_size;
      // The router stays fp32 in every release (spec §2.5): it is read as a matrix, but only in F32.
      b.add(mp + "gate.weight", {E, H}, R::RouterGate, TensorStorage::Linear, DType::F32);
      b.vector(mp + "e_score_correction_bias", E, R::RoutingBias, DType::F32);
      for (int e = 0; e < E; ++e) {
        b.expert = e;
        const std::string ep = mp + "experts." + std::to_string(e) + ".";
        b.linear(ep + "w1.weight", I, H, R::ExpertGate);
        b.linear(ep + "w3.weight", I, H, R::ExpertUp);
        b.linear(ep + "w2.weight", H, I, R::ExpertDown);
      }
      b.expert = -1;
      if (t.n_shared_experts > 0) {
        const int64_t sw = int64_t(t.shared_intermediate_size) * t.n_shared_experts;
        b.linear(mp + "shared_experts.gate_proj.weight", sw, H, R::SharedGate);
        b.linear(mp + "shared_experts.up_proj.weight", sw, H, R::SharedUp);
        b.linear(mp + "shared_experts.down_proj.weight", H, sw, R::SharedDown);
      }
    } else {
      const int64_t D = t.dense_intermediate_size;
      b.linear(lp + "mlp.gate_proj.weight", D, H, R::MlpGate);
      b.linear(lp + "mlp.up_proj.weight", D, H, R::MlpUp);
      b.linear(lp + "mlp.down_proj.weight", H, D, R::MlpDown);
    }
  }
  b.layer = -1;
  b.vector(p + "model.norm.weight", H, R::FinalNorm);
  if (!t.tie_word_embeddings) b.linear(p + "lm_head.weight", V, H, R::LmHead);
}

void add_vision(const ModelConfig& cfg, SchemaBuilder& b) {
  using R = TensorRole;
  const VisionConfig& v = *cfg.vision;
  const int64_t vh = v.hidden_size, vi = v.intermediate_size, P = cfg.projector_hidden_size;
  const int64_t merge2 = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
  b.part = ModelPart::VisionTower;
  const std::string vm = "vision_tower.vision_model.";
  // Conv3d weight [vh, C, T, P, P], fp32 on disk, used as a [vh, C·T·P·P] matrix.
  b.add(vm + "embeddings.patch_embedding.weight",
        {vh, v.num_channels, v.temporal_patch_size, v.patch_size, v.patch_size}, R::PatchEmbedding,
        TensorStorage::Linear, DType::F32);
  b.layer_norm(vm + "pre_layrnorm", vh, R::VisionPreNorm);
  for (int l = 0; l < v.num_hidden_layers; ++l) {
    b.layer = l;
    const std::string lp = vm + "encoder.layers." + std::to_string(l) + ".";
    b.layer_norm(lp + "layer_norm1", vh, R::VisionNorm1);
    b.linear_with_bias(lp + "self_attn.q_proj", vh, vh, R::VisionQProj);
    b.linear_with_bias(lp + "self_attn.k_proj", vh, vh, R::VisionKProj);
    b.linear_with_bias(lp + "self_attn.v_proj", vh, vh, R::VisionVProj);
    b.linear_with_bias(lp + "self_attn.out_proj", vh, vh, R::VisionOutProj);
    b.layer_norm(lp + "layer_norm2", vh, R::VisionNorm2);
    b.linear_with_bias(lp + "mlp.fc1", vi, vh, R::VisionFc1);
    b.linear_with_bias(lp + "mlp.fc2", vh, vi, R::VisionFc2);
  }
  b.layer = -1;
  b.part = ModelPart::Projector;
  b.linear_with_bias("multi_modal_projector.linear_1", P, vh, R::ProjectorLinear1);
  b.linear_with_bias("multi_modal_projector.linear_2", P, P, R::ProjectorLinear2);
  b.linear_with_bias("patch_merge_mlp.linear_1", P, P * merge2, R::MergerLinear1);
  b.linear_with_bias("patch_merge_mlp.linear_2", P, P, R::MergerLinear2);
}

}  // namespace

std::vector<TensorSpec> text_tensor_schema(const TextConfig& cfg) {
  SchemaBuilder b;
  add_text(cfg, b);
  return std::move(b.out);
}

std::vector<TensorSpec> vision_tensor_schema(const ModelConfig& cfg) {
  M3_CHECK(cfg.vision.has_value(), cfg.source, ": the model has no vision tower (no vision_config)");
  SchemaBuilder b;
  add_vision(cfg, b);
  return std::move(b.out);
}

std::vector<TensorSpec> tensor_schema(const ModelConfig& cfg) {
  cfg.validate();
  std::vector<TensorSpec> all = text_tensor_schema(cfg.text);
  if (cfg.vision) {
    std::vector<TensorSpec> v = vision_tensor_schema(cfg);
    all.insert(all.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  }
  return all;
}

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::Embedding: return "embedding";
    case TensorRole::LmHead: return "lm_head";
    case TensorRole::FinalNorm: return "final_norm";
    case TensorRole::InputNorm: return "input_norm";
    case TensorRole::PostAttentionNorm: return "post_attention_norm";
    case TensorRole::QProj: return "q_proj";
    case TensorRole::KProj: return "k_proj";
    case TensorRole::VProj: return "v_proj";
    case TensorRole::OProj: return "o_proj";
    case TensorRole::QNorm: return "q_norm";
    case TensorRole::KNorm: return "k_norm";
    case TensorRole::IndexQProj: return "index_q_proj";
    case TensorRole::IndexKProj: return "index_k_proj";
    case TensorRole::IndexQNorm: return "index_q_norm";
    case TensorRole::IndexKNorm: return "index_k_norm";
    case TensorRole::MlpGate: return "mlp_gate";
    case TensorRole::MlpUp: return "mlp_up";
    case TensorRole::MlpDown: return "mlp_down";
    case TensorRole::RouterGate: return "router_gate";
    case TensorRole::RoutingBias: return "routing_bias";
    case TensorRole::ExpertGate: return "expert_gate";
    case TensorRole::ExpertUp: return "expert_up";
    case TensorRole::ExpertDown: return "expert_down";
    case TensorRole::SharedGate: return "shared_gate";
    case TensorRole::SharedUp: return "shared_up";
    case TensorRole::SharedDown: return "shared_down";
    case TensorRole::PatchEmbedding: return "patch_embedding";
    case TensorRole::VisionPreNorm: return "vision_pre_norm";
    case TensorRole::VisionNorm1: return "vision_norm1";
    case TensorRole::VisionNorm2: return "vision_norm2";
    case TensorRole::VisionQProj: return "vision_q_proj";
    case TensorRole::VisionKProj: return "vision_k_proj";
    case TensorRole::VisionVProj: return "vision_v_proj";
    case TensorRole::VisionOutProj: return "vision_out_proj";
    case TensorRole::VisionFc1: return "vision_fc1";
    case TensorRole::VisionFc2: return "vision_fc2";
    case TensorRole::ProjectorLinear1: return "projector_linear_1";
    case TensorRole::ProjectorLinear2: return "projector_linear_2";
    case TensorRole::MergerLinear1: return "merger_linear_1";
    case TensorRole::MergerLinear2: return "merger_linear_2";
  }
  return "?";
}

}  // namespace m3
