#include "model/random_checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace m3 {

namespace {

// splitmix64 + Box-Muller: the same bytes for the same seed on every platform and library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double((next() >> 11) + 1) * 0x1.0p-53; }  // (0, 1]
  double normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * M_PI * uniform();
    spare_ = r * std::sin(a);
    have_spare_ = true;
    return r * std::cos(a);
  }

 private:
  uint64_t s_;
  bool have_spare_ = false;
  double spare_ = 0.0;
};

TensorData random_tensor(Rng& rng, const std::string& name, std::vector<int64_t> shape, double mean, double stddev,
                         DType dtype) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  TensorData t{name, dtype, std::move(shape), std::vector<uint8_t>(size_t(numel) * dtype_size(dtype))};
  for (int64_t i = 0; i < numel; ++i) {
    const float v = float(mean + stddev * rng.normal());
    if (dtype == DType::F32) {
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  M3_CHECK(f, path, ": cannot open for writing");
  f << text;
  M3_CHECK(f.good(), path, ": write failed");
}

}  // namespace

// Vision tower + projector + merger (spec §2.4): patch embedding fp32, everything else bf16.
// Drawn from their own stream after all text tensors, so a preset's text weights are the same
// bytes with and without a vision tower.
void add_random_vision_tensors(const ModelConfig& cfg, uint64_t seed, std::vector<TensorData>& tensors) {
  const VisionConfig& v = *cfg.vision;
  Rng rng(seed ^ 0x5669'7369'6F6E'5457ull);  // "VisionTW"
  const int64_t vh = v.hidden_size, vi = v.intermediate_size, P = cfg.projector_hidden_size;
  const int64_t merge2 = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
  auto linear = [&](const std::string& name, int64_t out, int64_t in, double gain = 1.0) {
    tensors.push_back(random_tensor(rng, name + ".weight", {out, in}, 0.0, gain / std::sqrt(double(in)), DType::BF16));
    tensors.push_back(random_tensor(rng, name + ".bias", {out}, 0.0, 0.02, DType::BF16));
  };
  // CLIP LayerNorm: scale used as stored (centred at 1), plus a bias.
  auto layer_norm = [&](const std::string& name) {
    tensors.push_back(random_tensor(rng, name + ".weight", {vh}, 1.0, 0.1, DType::BF16));
    tensors.push_back(random_tensor(rng, name + ".bias", {vh}, 0.0, 0.1, DType::BF16));
  };
  const std::string vm = "vision_tower.vision_model.";
  tensors.push_back(random_tensor(rng, vm + "embeddings.patch_embedding.weight",
                                  {vh, v.num_channels, v.temporal_patch_size, v.patch_size, v.patch_size}, 0.0,
                                  1.0 / std::sqrt(double(v.patch_input_dim())), DType::F32));
  layer_norm(vm + "pre_layrnorm");
  for (int l = 0; l < v.num_hidden_layers; ++l) {
    const std::string lp = vm + "encoder.layers." + std::to_string(l) + ".";
    layer_norm(lp + "layer_norm1");
    linear(lp + "self_attn.q_proj", vh, vh, 2.0);  // larger q/k: attention that is not uniform
    linear(lp + "self_attn.k_proj", vh, vh, 2.0);
    linear(lp + "self_attn.v_proj", vh, vh);
    linear(lp + "self_attn.out_proj", vh, vh, 0.5);
    layer_norm(lp + "layer_norm2");
    linear(lp + "mlp.fc1", vi, vh);
    linear(lp + "mlp.fc2", vh, vi, 0.5);
  }
  linear("multi_modal_projector.linear_1", P, vh);
  linear("multi_modal_projector.linear_2", P, P);
  linear("patch_merge_mlp.linear_1", P, P * merge2);
  linear("patch_merge_mlp.linear_2", P, P);
}


std::vector<std::string> preset_names() { return {"tiny", "small", "m3-slice", "tiny-vl", "small-vl"}; }

int preset_num_merges(const std::string&) { return 256; }

namespace {

// "tiny-vl" -> "tiny": the -vl presets are the text presets plus a vision tower.
std::string text_preset(const std::string& preset) {
  const std::string suffix = "-vl";
  if (preset.size() > suffix.size() && preset.compare(preset.size() - suffix.size(), suffix.size(), suffix) == 0)
    return preset.substr(0, preset.size() - suffix.size());
  return preset;
}

}  // namespace

ModelConfig preset_config(const std::string& preset_name, int vocab_size) {
  const std::string preset = text_preset(preset_name);
  const bool vision = preset != preset_name;
  ModelConfig c;
  c.architectures = {"MiniMaxM3SparseForConditionalGeneration"};
  c.model_type = "minimax_m3_vl";
  TextConfig& t = c.text;
  t.vocab_size = (vocab_size + 7) / 8 * 8;
  t.max_position_embeddings = 1048576;
  t.rms_norm_eps = 1e-6;
  t.rope_theta = 5000000.0;
  t.n_shared_experts = 1;
  t.routed_scaling_factor = 2.0;
  t.sparse.use_sparse_attention = true;
  int layers = 4;
  if (preset == "tiny") {
    // Small enough for a float64 NumPy reference on thousands of tokens; a block of 16 and top-4
    // make MSA sparse from the 65th token on.
    t.hidden_size = 128;
    t.num_attention_heads = 4;
    t.num_key_value_heads = 2;
    t.head_dim = 32;
    t.rotary_dim = 16;
    t.intermediate_size = 64;
    t.shared_intermediate_size = 64;
    t.dense_intermediate_size = 256;
    t.num_local_experts = 8;
    t.num_experts_per_tok = 2;
    t.sparse.sparse_index_dim = 32;
    t.sparse.sparse_block_size = 16;
    t.sparse.sparse_topk_blocks = 4;
  } else if (preset == "small") {
    // The shape of the llama.cpp comparison model in ../shared/DESIGN.md: M3's head_dim, index dim,
    // block size and top-k, scaled-down widths.
    t.hidden_size = 512;
    t.num_attention_heads = 8;
    t.num_key_value_heads = 2;
    t.head_dim = 128;
    t.rotary_dim = 64;
    t.intermediate_size = 512;
    t.shared_intermediate_size = 512;
    t.dense_intermediate_size = 1024;
    t.num_local_experts = 8;
    t.num_experts_per_tok = 2;
    t.sparse.sparse_index_dim = 128;
    t.sparse.sparse_block_size = 128;
    t.sparse.sparse_topk_blocks = 16;
  } else if (preset == "m3-slice") {
    // M3's real layer widths (hidden 6144, 64/4 heads of 128, index 4x128, experts 3072 wide with
    // top-4 routing plus the shared one, dense MLP 12288) in 4 layers (1 dense + 3 MSA) with 8
    // routed experts: per token it reads the same weights per layer as M3, so decode's balance of
    // weight bytes against cache bytes is M3's (4.5 GB on disk; for benchmarks, not tests).
    t.hidden_size = 6144;
    t.num_attention_heads = 64;
    t.num_key_value_heads = 4;
    t.head_dim = 128;
    t.rotary_dim = 64;
    t.intermediate_size = 3072;
    t.shared_intermediate_size = 3072;
    t.dense_intermediate_size = 12288;
    t.num_local_experts = 8;
    t.num_experts_per_tok = 4;
    t.sparse.sparse_index_dim = 128;
    t.sparse.sparse_block_size = 128;
    t.sparse.sparse_topk_blocks = 16;
  } else {
    fail("unknown preset '", preset_name, "' (expected tiny, small, m3-slice, tiny-vl or small-vl)");
  }
  t.sparse.sparse_num_index_heads = t.num_key_value_heads;
  t.num_hidden_layers = layers;
  t.moe_layer_freq.assign(size_t(layers), 1);
  t.moe_layer_freq[0] = 0;
  t.sparse.sparse_attention_freq = t.moe_layer_freq;
  t.sparse.sparse_disable_index_value = t.moe_layer_freq;
  if (vision) {
    // The M3 tower's structure (patch 14, temporal 2, 2x2 merge, 3D RoPE, erf GELU) at a small width.
    // tiny: head_dim 16 -> 3D RoPE 4 dims per axis + 4 pass-through; small: M3's head_dim 80 ->
    // 26 per axis + 2 pass-through.
    VisionConfig v;
    v.hidden_size = preset == "tiny" ? 64 : 320;
    v.num_attention_heads = 4;
    v.num_hidden_layers = 2;
    v.intermediate_size = 2 * v.hidden_size;
    v.projection_dim = t.hidden_size;
    c.vision = v;
    c.projector_hidden_size = t.hidden_size;  // merged vision tokens replace token embeddings
    // image_token_index / video_token_index come from the tokenizer (make_random_checkpoint).
  }
  return c;
}

void make_random_checkpoint(const RandomCheckpointOptions& opt) {
  M3_CHECK(!opt.out_dir.empty(), "make-checkpoint: --out is required");
  const std::string tokenizer_json = make_small_tokenizer_json(preset_num_merges(opt.preset));
  const auto tok = Tokenizer::from_json_text(tokenizer_json, "generated tokenizer.json");
  ModelConfig cfg = preset_config(opt.preset, tok->vocab_size());
  TextConfig& t = cfg.text;
  if (opt.block_size) t.sparse.sparse_block_size = *opt.block_size;
  if (opt.topk) t.sparse.sparse_topk_blocks = *opt.topk;
  if (opt.layers) {
    M3_CHECK(*opt.layers >= 1, "make-checkpoint: --layers must be >= 1");
    t.num_hidden_layers = *opt.layers;
    t.moe_layer_freq.assign(size_t(*opt.layers), 1);
    t.moe_layer_freq[0] = 0;
    t.sparse.sparse_attention_freq = t.moe_layer_freq;
    t.sparse.sparse_disable_index_value = t.moe_layer_freq;
  }
  if (cfg.vision) {
    const auto image = tok->token_id("]<]image[>["), video = tok->token_id("]<]video[>[");
    M3_CHECK(image && video, "make-checkpoint: the tokenizer lacks the image/video tokens");
    cfg.image_token_index = *image;
    cfg.video_token_index = *video;
  }
  t.bos_token_id = tok->token_id("]~!b[");
  t.eos_token_id = tok->token_id("[e~[");
  cfg.source = opt.out_dir + "/config.json";
  cfg.validate();

  Rng rng(opt.seed);
  const int64_t H = t.hidden_size, hd = t.head_dim, V = t.vocab_size;
  const double wscale = 1.0 / std::sqrt(double(H));
  std::vector<TensorData> tensors;
  auto linear = [&](const std::string& name, int64_t out, int64_t in, double gain = 1.0) {
    tensors.push_back(random_tensor(rng, name, {out, in}, 0.0, gain / std::sqrt(double(in)), DType::BF16));
  };
  // Gemma norm weights are stored centred at 0 (scale 1 + w).
  auto norm = [&](const std::string& name, int64_t n) {
    tensors.push_back(random_tensor(rng, name, {n}, 0.0, 0.1, DType::BF16));
  };
  const std::string p = "language_model.";
  tensors.push_back(random_tensor(rng, p + "model.embed_tokens.weight", {V, H}, 0.0, 1.0, DType::BF16));
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    const std::string lp = p + "model.layers." + std::to_string(l) + ".";
    norm(lp + "input_layernorm.weight", H);
    norm(lp + "post_attention_layernorm.weight", H);
    linear(lp + "self_attn.q_proj.weight", t.num_attention_heads * hd, H);
    linear(lp + "self_attn.k_proj.weight", t.num_key_value_heads * hd, H);
    linear(lp + "self_attn.v_proj.weight", t.num_key_value_heads * hd, H);
    linear(lp + "self_attn.o_proj.weight", H, t.num_attention_heads * hd, 0.5);
    norm(lp + "self_attn.q_norm.weight", hd);
    norm(lp + "self_attn.k_norm.weight", hd);
    if (t.is_sparse_layer(l)) {
      const int64_t id = t.sparse.sparse_index_dim;
      linear(lp + "self_attn.index_q_proj.weight", t.sparse.sparse_num_index_heads * id, H);
      linear(lp + "self_attn.index_k_proj.weight", id, H);
      norm(lp + "self_attn.index_q_norm.weight", id);
      norm(lp + "self_attn.index_k_norm.weight", id);
    }
    if (t.is_moe_layer(l)) {
      const std::string mp = lp + "block_sparse_moe.";
      tensors.push_back(random_tensor(rng, mp + "gate.weight", {t.num_local_experts, H}, 0.0, wscale, DType::F32));
      tensors.push_back(random_tensor(rng, mp + "e_score_correction_bias", {t.num_local_experts}, 0.0, 0.05, DType::F32));
      for (int e = 0; e < t.num_local_experts; ++e) {
        const std::string ep = mp + "experts." + std::to_string(e) + ".";
        linear(ep + "w1.weight", t.intermediate_size, H);
        linear(ep + "w3.weight", t.intermediate_size, H);
        linear(ep + "w2.weight", H, t.intermediate_size, 0.5);
      }
      const int64_t sw = int64_t(t.shared_intermediate_size) * t.n_shared_experts;
      linear(mp + "shared_experts.gate_proj.weight", sw, H);
      linear(mp + "shared_experts.up_proj.weight", sw, H);
      linear(mp + "shared_experts.down_proj.weight", H, sw, 0.5);
    } else {
      linear(lp + "mlp.gate_proj.weight", t.dense_intermediate_size, H);
      linear(lp + "mlp.up_proj.weight", t.dense_intermediate_size, H);
      linear(lp + "mlp.down_proj.weight", H, t.dense_intermediate_size, 0.5);
    }
  }
  norm(p + "model.norm.weight", H);
  linear(p + "lm_head.weight", V, H, 2.0);
  if (cfg.vision) add_random_vision_tensors(cfg, opt.seed, tensors);

  std::filesystem::create_directories(opt.out_dir);
  write_checkpoint_tensors(opt.out_dir, tensors, opt.max_shard_bytes == 0 ? UINT64_MAX : opt.max_shard_bytes);
  write_text_file(opt.out_dir + "/config.json", cfg.to_json_text());
  write_text_file(opt.out_dir + "/tokenizer.json", tokenizer_json);
}

}  // namespace m3
