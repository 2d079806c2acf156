#pragma once
// A loaded model folder: config, mapped weights, tokenizer, thread pool, text model and (when the
// checkpoint has one) vision tower. The entry point of the public API (docs/API.md): load an
// engine, then tokenize (tokenizer()), encode media (m3/media.h), build prompts (m3/prompt.h),
// generate (m3/session.h) or run batches of sequences (m3/batch.h).
//
// The accessors under "parts" return the engine's own types, which stay incomplete for code that
// includes only include/m3/: the layers of src/ and the tests use them, tools/ and src/server/
// cannot (scripts/check_layers.py enforces that they include only the public headers).
#include <cstdint>
#include <memory>
#include <string>

#include "m3/sampling.h"

namespace m3 {

class Tokenizer;
class TextModel;
class TensorStore;
class ThreadPool;
struct ModelConfig;
namespace vision {
class VisionTower;
}

// What a client needs to know about the loaded model.
struct ModelInfo {
  std::string source;          // the config.json read
  int64_t hidden_size = 0;
  int vocab_size = 0;          // rows of the embedding and logits per token (may be padded)
  int sample_vocab = 0;        // ids that can be sampled: those the tokenizer can decode
  int64_t max_position = 0;    // max_position_embeddings (0: no limit given)
  int layers = 0;
  int block_size = 0;          // MSA block (tokens per KV page)
  bool has_vision = false;     // images and videos can be encoded
  int threads = 0;             // of the engine's pool
  int64_t parameters = 0;      // elements of every checkpoint tensor
  uint64_t weight_bytes = 0;   // bytes of every checkpoint tensor
  std::string weight_dtypes;   // e.g. "BF16 x 412, F32 x 30" (tensors per element type)
  bool weights_mapped = true;  // false: read into memory (--no-mmap)
  bool weights_locked = false; // mlock'ed (--mlock)
  double load_seconds = 0.0;
  // The sampling a request gets for the fields it leaves out: the checkpoint's
  // generation_config.json (temperature, top_p, top_k; do_sample false: greedy) when it has one,
  // else the release's published defaults, temperature 1.0, top-p 0.95, top-k 40 (docs/CLI.md).
  SamplingParams default_sampling;
};

struct EngineOptions {
  int threads = 0;     // 0: one per CPU the process may use (its affinity mask and CPU quota)
  bool mmap = true;    // false: read the weights into memory instead of mapping them (--no-mmap)
  bool mlock = false;  // lock the weights in RAM (--mlock); an error when RLIMIT_MEMLOCK is too low
};

class Engine {
 public:
  // dir holds config.json, tokenizer.json and model.safetensors (or shards + index). threads 0:
  // one per usable CPU. Throws m3::Error naming the file and field on bad input.
  static std::unique_ptr<Engine> load(const std::string& dir, const EngineOptions& options);
  static std::unique_ptr<Engine> load(const std::string& dir, int threads = 0);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const { return info_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // Parts (see above).
  const ModelConfig& config() const { return *config_; }
  const TensorStore& store() const { return *store_; }
  ThreadPool& pool() const { return *pool_; }
  TextModel& model() const { return *model_; }
  const vision::VisionTower* vision_tower() const { return tower_.get(); }  // nullptr: no vision

 private:
  Engine();
  ModelInfo info_;
  std::unique_ptr<ModelConfig> config_;
  std::unique_ptr<TensorStore> store_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<TextModel> model_;
  std::unique_ptr<vision::VisionTower> tower_;
};

}  // namespace m3
