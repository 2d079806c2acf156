#pragma once
// The text tower's weights, bound to the memory-mapped checkpoint tensors (spec §2.1–§2.3).
// Matrices stay in the file; only the small norm vectors are widened to fp32 (as 1 + w).
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "format/linear_weight.h"

namespace m3 {

struct MlpWeights {  // SwiGLU-OAI MLP: down(act(gate(x), up(x)))
  LinearWeight gate, up, down;
};

struct AttentionWeights {
  LinearWeight q, k, v, o;
  std::vector<float> q_norm_scale, k_norm_scale;  // (head_dim), 1 + w
  bool sparse = false;                            // MSA index branch present
  LinearWeight index_q, index_k;
  std::vector<float> index_q_norm_scale, index_k_norm_scale;  // (index_dim)
};

struct MoeWeights {
  LinearWeight router;               // [experts, hidden], fp32 on disk
  std::vector<float> routing_bias;   // e_score_correction_bias (experts), selection only
  std::vector<MlpWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
};

struct LayerWeights {
  std::vector<float> input_norm_scale, post_attention_norm_scale;  // (hidden)
  AttentionWeights attn;
  bool is_moe = false;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

struct TextWeights {
  LinearWeight embed;    // [vocab, hidden]
  LinearWeight lm_head;  // [vocab, hidden]
  std::vector<float> final_norm_scale;
  std::vector<LayerWeights> layers;
};

// Binds every tensor of the schema (io/tensor_schema.h); matrices in any registered weight format.
// Throws m3::Error naming the tensor when one is missing, has another shape than the config
// implies, or is stored in no known format.
TextWeights bind_text_weights(const TensorStore& store, const TextConfig& cfg,
                              const QuantizationConfig* quantization = nullptr);

}  // namespace m3
