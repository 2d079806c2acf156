// Parameter, tensor and memory accounting from the config alone (spec §2, checked in §2.6): sums
// over the tensor schema (io/tensor_schema.h), the same list the loader binds and make-checkpoint
// writes. For the real config they reproduce the release exactly (427,040,140,160 params, 23,416
// tensors, 854,172,958,720 bytes), which is how we know no tensor is forgotten.
#include "io/model_config.h"
#include "io/tensor_schema.h"

namespace m3 {

ModelCounts count_model(const ModelConfig& cfg) {
  const std::vector<TensorSpec> schema = tensor_schema(cfg);  // validates cfg
  const TextConfig& t = cfg.text;
  using u64 = uint64_t;

  ModelCounts c;
  c.layer_params.assign(size_t(t.num_hidden_layers), 0);
  u64 routed_expert_params = 0;  // all routed experts of all layers
  for (const TensorSpec& s : schema) {
    const u64 n = u64(s.numel());
    ++c.tensor_count;
    c.weight_bytes += n * dtype_size(s.release_dtype);
    if (s.release_dtype == DType::F32) c.fp32_params += n;
    switch (s.part) {
      case ModelPart::Text: c.text_params += n; break;
      case ModelPart::VisionTower: c.vision_tower_params += n; break;
      case ModelPart::Projector: c.projector_params += n; break;
    }
    if (s.part != ModelPart::Text) continue;
    if (s.layer >= 0) c.layer_params[size_t(s.layer)] += n;
    if (s.role == TensorRole::Embedding) c.embedding_params += n;
    if (s.role == TensorRole::LmHead) c.lm_head_params += n;
    if (s.expert >= 0) routed_expert_params += n;
  }
  c.vision_params = c.vision_tower_params + c.projector_params;
  c.total_params = c.text_params + c.vision_params;

  // Active per text token: everything in the text model (embedding table and lm_head included,
  // the convention behind "26B active") minus the routed experts a token does not use. The
  // vision tower is not counted: it runs per image patch, not per token.
  u64 moe_layers = 0, sparse_layers = 0;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    moe_layers += t.is_moe_layer(l);
    sparse_layers += t.is_sparse_layer(l);
  }
  const u64 E = u64(t.num_local_experts);
  const u64 per_expert = moe_layers > 0 && E > 0 ? routed_expert_params / (moe_layers * E) : 0;
  c.expert_params = per_expert;
  c.active_params = c.text_params - moe_layers * (E - u64(t.num_experts_per_tok)) * per_expert;

  // Cache per token: K and V of every layer (bf16), plus one index key per MSA layer (bf16).
  const u64 kv_width = u64(t.num_key_value_heads) * u64(t.head_dim);
  c.kv_bytes_per_token = u64(t.num_hidden_layers) * 2 * kv_width * 2;
  c.index_k_bytes_per_token = sparse_layers * u64(t.sparse.sparse_index_dim) * 2;
  return c;
}

}  // namespace m3
