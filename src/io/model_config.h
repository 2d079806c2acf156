#pragma once
// config.json -> typed, validated ModelConfig (spec §1). Keys keep their Hugging Face names so a
// reader of the spec finds them. Validation errors name the file and the key.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace m3 {

struct SparseAttentionConfig {
  bool use_sparse_attention = false;
  int sparse_index_dim = 128;
  int sparse_num_index_heads = 4;
  int sparse_topk_blocks = 16;
  int sparse_block_size = 128;
  std::string sparse_score_type = "max";  // only "max" is supported
  int sparse_init_block = 0;
  int sparse_local_block = 1;
  std::vector<int> sparse_attention_freq;        // per layer: 1 = MSA layer
  std::vector<int> sparse_disable_index_value;   // per layer: 1 = no index_v/index_o

  bool operator==(const SparseAttentionConfig&) const = default;
};

struct TextConfig {
  int hidden_size = 0;
  int intermediate_size = 0;        // per routed expert
  int dense_intermediate_size = 0;  // dense MLP layers
  int shared_intermediate_size = 0;
  int n_shared_experts = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool use_gemma_norm = true;
  bool attention_output_gate = false;
  double rope_theta = 10000.0;
  int rotary_dim = 0;  // from rotary_dim, else partial_rotary_factor * head_dim
  std::string hidden_act = "swigluoai";
  double swiglu_alpha = 1.702;
  double swiglu_limit = 7.0;
  double swiglu_beta = 1.0;
  bool use_qk_norm = true;
  std::string qk_norm_type = "per_head";
  bool tie_word_embeddings = false;
  int num_local_experts = 0;
  int num_experts_per_tok = 0;
  std::string scoring_func = "sigmoid";
  bool use_routing_bias = true;
  double routed_scaling_factor = 1.0;
  std::vector<int> moe_layer_freq;  // per layer: 1 = MoE FFN
  int num_mtp_modules = 0;
  int num_nextn_predict_layers = 0;
  std::optional<int> bos_token_id, eos_token_id;
  SparseAttentionConfig sparse;

  bool operator==(const TextConfig&) const = default;

  bool is_moe_layer(int layer) const { return moe_layer_freq.at(layer) != 0; }
  bool is_sparse_layer(int layer) const {
    return sparse.use_sparse_attention && sparse.sparse_attention_freq.at(layer) != 0;
  }
};

struct VisionConfig {
  int hidden_size = 0;
  int num_attention_heads = 0;
  int num_hidden_layers = 0;
  int intermediate_size = 0;
  int patch_size = 14;
  int image_size = 0;
  int projection_dim = 0;
  int num_channels = 3;
  double rope_theta = 10000.0;
  std::string rope_mode = "3d";
  std::string hidden_act = "gelu";
  double layer_norm_eps = 1e-5;
  int spatial_merge_size = 2;
  int temporal_patch_size = 2;
  int vision_segment_max_frames = 4;
  std::string position_embedding_type = "rope";  // only "rope" (3D RoPE, spec §5.4) is supported

  int head_dim() const { return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0; }
  // Values per patch row fed to the patch embedding: channels x temporal x patch x patch (1176).
  int patch_input_dim() const {
    return num_channels * temporal_patch_size * patch_size * patch_size;
  }
  bool operator==(const VisionConfig&) const = default;
};

// mlx-lm's "quantization" block (also written as "quantization_config"): the affine layout's
// default bits and group size, and per-module overrides keyed by module path ("<name>" of
// "<name>.weight"): {"bits", "group_size"}, or false for a module left unquantized. The layout of
// each weight is read from its tensors' shapes; this is checked against them (docs/FORMATS.md).
struct QuantizationConfig {
  struct Module {
    bool quantized = true;
    int bits = 0, group_size = 0;
    bool operator==(const Module&) const = default;
  };
  std::string mode = "affine";  // only "affine" is supported
  int bits = 4, group_size = 64;
  std::vector<std::pair<std::string, Module>> modules;  // in file order

  // What the config says for a module: its override, else the defaults.
  Module expected(const std::string& module) const;
  bool operator==(const QuantizationConfig&) const = default;
};

struct ModelConfig {
  std::string source;  // file it was read from, for messages
  std::vector<std::string> architectures;
  std::string model_type;
  int image_token_index = -1;
  int video_token_index = -1;
  int projector_hidden_size = 0;
  std::string projector_hidden_act = "gelu";
  bool multimodal_projector_bias = true;
  std::string torch_dtype = "bfloat16";
  // Which vision encoder output feeds the projector: only the last layer (-1), all tokens ("full").
  int vision_feature_layer = -1;
  std::string vision_feature_select_strategy = "full";
  TextConfig text;
  std::optional<VisionConfig> vision;
  std::optional<QuantizationConfig> quantization;  // mlx-lm affine checkpoints

  // Reads and validates; throws m3::Error "PATH: text_config.num_key_value_heads: ..." on problems.
  static ModelConfig from_file(const std::string& path);
  static ModelConfig from_json_text(const std::string& text, const std::string& source_name);
  // Round-trips through from_json_text (make-checkpoint writes config.json with this).
  std::string to_json_text() const;
  void validate() const;

  bool operator==(const ModelConfig&) const = default;
};

// Parameter and memory accounting (for `m3 inspect`), computed from the config alone.
struct ModelCounts {
  uint64_t text_params = 0;
  uint64_t vision_params = 0;   // vision tower + projector + merger
  uint64_t total_params = 0;
  uint64_t active_params = 0;   // per token: all non-expert weights + top-k routed experts (text)
  uint64_t weight_bytes = 0;    // bf16 except the fp32 router, routing bias and patch embedding
  uint64_t kv_bytes_per_token = 0;       // K and V of every layer, bf16
  uint64_t index_k_bytes_per_token = 0;  // index keys of every MSA layer, bf16

  // Breakdown (same conventions as above).
  uint64_t embedding_params = 0;         // embed_tokens (counted in text_params and active_params)
  uint64_t lm_head_params = 0;           // 0 when tie_word_embeddings
  uint64_t expert_params = 0;            // one routed expert: gate + up + down
  std::vector<uint64_t> layer_params;    // per decoder layer, norms included
  uint64_t vision_tower_params = 0;      // patch embedding + pre-LN + encoder layers
  uint64_t projector_params = 0;         // multi_modal_projector + patch_merge_mlp
  uint64_t fp32_params = 0;              // stored as float32 (router, routing bias, patch embedding)
  uint64_t tensor_count = 0;             // tensors a checkpoint of this config holds
};
ModelCounts count_model(const ModelConfig& cfg);

}  // namespace m3
