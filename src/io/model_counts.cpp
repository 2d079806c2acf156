// Parameter, tensor and memory accounting from the config alone (spec §2, checked in §2.6).
// Every term below is one tensor of the checkpoint listing in spec §2; the sums for the real
// config reproduce the release exactly (427,040,140,160 params, 23,416 tensors, 854,172,958,720
// bytes), which is how we know no tensor is forgotten.
#include "io/model_config.h"

namespace m3 {

ModelCounts count_model(const ModelConfig& cfg) {
  cfg.validate();  // the formulas assume consistent per-layer lists and positive sizes
  const TextConfig& t = cfg.text;
  using u64 = uint64_t;
  const u64 H = u64(t.hidden_size);
  const u64 V = u64(t.vocab_size);
  const u64 q_width = u64(t.num_attention_heads) * u64(t.head_dim);
  const u64 kv_width = u64(t.num_key_value_heads) * u64(t.head_dim);
  const u64 E = u64(t.num_local_experts);

  ModelCounts c;
  c.embedding_params = V * H;                             // model.embed_tokens.weight
  c.lm_head_params = t.tie_word_embeddings ? 0 : V * H;  // lm_head.weight
  c.text_params = c.embedding_params + c.lm_head_params + H;  // + model.norm.weight
  c.tensor_count = (t.tie_word_embeddings ? 1 : 2) + 1;
  c.expert_params = 3 * H * u64(t.intermediate_size);  // w1 (gate), w3 (up), w2 (down)

  u64 moe_layers = 0, sparse_layers = 0;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    // Attention: input/post-attention norms, q/k/v/o, per-head q_norm/k_norm (one vector each).
    u64 p = 2 * H + q_width * H + 2 * kv_width * H + H * q_width + 2 * u64(t.head_dim);
    u64 tensors = 2 + 4 + 2;
    if (t.is_sparse_layer(l)) {
      // MSA index branch: index_q_proj [heads*dim, H], index_k_proj [dim, H], two norms [dim].
      const u64 idim = u64(t.sparse.sparse_index_dim);
      p += u64(t.sparse.sparse_num_index_heads) * idim * H + idim * H + 2 * idim;
      tensors += 4;
      ++sparse_layers;
    }
    if (t.is_moe_layer(l)) {
      const u64 router = E * H + E;  // gate.weight [E, H] + e_score_correction_bias [E], fp32
      p += router + E * c.expert_params;
      tensors += 2 + 3 * E;
      c.fp32_params += router;
      if (t.n_shared_experts > 0) {  // shared_experts.{gate,up,down}_proj
        p += 3 * H * u64(t.shared_intermediate_size) * u64(t.n_shared_experts);
        tensors += 3;
      }
      ++moe_layers;
    } else {
      p += 3 * H * u64(t.dense_intermediate_size);  // mlp.{gate,up,down}_proj
      tensors += 3;
    }
    c.layer_params.push_back(p);
    c.text_params += p;
    c.tensor_count += tensors;
  }

  if (cfg.vision) {
    const VisionConfig& v = *cfg.vision;
    const u64 vh = u64(v.hidden_size), vi = u64(v.intermediate_size);
    const u64 patch = vh * u64(v.patch_input_dim());  // Conv3d as [vh, C*T*P*P], fp32, no bias
    const u64 per_layer = 4 * (vh * vh + vh)           // q/k/v/out_proj weight + bias
                          + 2 * (2 * vh)               // layer_norm1/2 weight + bias
                          + (vi * vh + vi)             // fc1
                          + (vh * vi + vh);            // fc2
    c.vision_tower_params = patch + 2 * vh + u64(v.num_hidden_layers) * per_layer;  // + pre_layrnorm
    c.fp32_params += patch;
    const u64 P = u64(cfg.projector_hidden_size);
    const u64 merge = u64(v.spatial_merge_size) * u64(v.spatial_merge_size);
    c.projector_params = (P * vh + P) + (P * P + P)              // multi_modal_projector
                         + (P * (P * merge) + P) + (P * P + P);  // patch_merge_mlp
    c.vision_params = c.vision_tower_params + c.projector_params;
    c.tensor_count += 1 + 2 + u64(v.num_hidden_layers) * 16 + 4 + 4;
  }
  c.total_params = c.text_params + c.vision_params;

  // Active per text token: everything in the text model (embedding table and lm_head included,
  // the convention behind "26B active") minus the routed experts a token does not use. The
  // vision tower is not counted: it runs per image patch, not per token.
  const u64 unused_experts = E - u64(t.num_experts_per_tok);
  c.active_params = c.text_params - moe_layers * unused_experts * c.expert_params;

  // bf16 (2 bytes) everywhere except the fp32 tensors, which take 2 bytes more each.
  c.weight_bytes = 2 * c.total_params + 2 * c.fp32_params;

  // Cache per token: K and V of every layer (bf16), plus one index key per MSA layer (bf16).
  c.kv_bytes_per_token = u64(t.num_hidden_layers) * 2 * kv_width * 2;
  c.index_k_bytes_per_token = sparse_layers * u64(t.sparse.sparse_index_dim) * 2;
  return c;
}

}  // namespace m3
