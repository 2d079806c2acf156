#pragma once
// Small checkpoints in the real MiniMax-M3 layout with seeded random weights, for tests, demos and
// benchmarks (no real weights can be downloaded here). The code that loads them is the code that
// loads the 854 GB release.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace m3 {

struct RandomCheckpointOptions {
  std::string preset = "tiny";  // tiny | small | m3-slice | tiny-vl | small-vl (see preset_config)
  uint64_t seed = 0;
  std::string out_dir;
  std::optional<int> block_size;  // overrides sparse_block_size
  std::optional<int> topk;        // overrides sparse_topk_blocks
  std::optional<int> layers;      // overrides num_hidden_layers (first layer dense, the rest MSA + MoE)
  uint64_t max_shard_bytes = 0;   // 0: one model.safetensors; else shards + index
};

std::vector<std::string> preset_names();
// The config of a preset for a tokenizer of `vocab_size` ids (rounded up to a multiple of 8).
// "<preset>-vl" adds a vision tower (2 layers, 4 heads, MLP 2x wide; tiny: hidden 64 = 4 x 16,
// small: hidden 320 = 4 x 80, M3's vision head_dim; projector width = text hidden); its image/video
// token ids are left for make_random_checkpoint to fill from the tokenizer.
ModelConfig preset_config(const std::string& preset, int vocab_size);
// Number of BPE merges of the preset's tokenizer.
int preset_num_merges(const std::string& preset);

// Appends seeded random vision tower + projector + merger tensors (spec §2.4) for cfg.vision and
// cfg.projector_hidden_size (benchmarks build towers of other shapes with it).
struct TensorData;
void add_random_vision_tensors(const ModelConfig& cfg, uint64_t seed, std::vector<TensorData>& tensors);

// Writes config.json, tokenizer.json and the safetensors into out_dir (created if needed).
void make_random_checkpoint(const RandomCheckpointOptions& opt);

}  // namespace m3
