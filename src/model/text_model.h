#pragma once
// The MiniMax-M3 text model (spec §3): embedding, decoder layers, final norm, lm_head.
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "memory/kv_cache.h"
#include "memory/workspace.h"
#include "model/text_weights.h"

namespace m3 {

enum class LogitsFor { None, Last, All };

// One sequence's part of a batched forward pass: n tokens (or n rows of input embeddings) appended
// to `cache` at positions cache->length() .. +n-1.
struct BatchInput {
  KvCache* cache = nullptr;
  const int32_t* tokens = nullptr;     // n ids, or
  const float* embeddings = nullptr;   // (n, hidden) input embeddings (the multimodal path)
  int64_t n = 0;
  LogitsFor which = LogitsFor::Last;
  std::vector<float>* logits = nullptr;  // (1, vocab) for Last, (n, vocab) for All; unused for None
};

class TextModel {
 public:
  // Binds the weights in `store` (which must outlive the model).
  TextModel(const ModelConfig& cfg, const TensorStore& store, ThreadPool& pool);

  const TextConfig& config() const { return cfg_; }
  KvCacheShape cache_shape() const;
  int vocab_size() const { return cfg_.vocab_size; }

  // Runs n tokens at positions cache.length() .. +n-1, storing their K/V, and advances the cache.
  // logits: (1, vocab) for Last, (n, vocab) for All. Token ids are checked against the vocabulary.
  void forward(KvCache& cache, const int32_t* tokens, int64_t n, LogitsFor which, std::vector<float>& logits);
  // Same from precomputed input embeddings (rows, hidden): the multimodal path.
  void forward_embeddings(KvCache& cache, const float* x, int64_t n, LogitsFor which, std::vector<float>& logits);

  // Continuous batching: the inputs of several sequences (distinct caches) in one pass, so every
  // weight matrix is read once for all of them. Each sequence's results are bit-identical to
  // running it alone (the kernels' results do not depend on the number of rows; see
  // docs/ARCHITECTURE.md).
  void forward_batch(const std::vector<BatchInput>& inputs);
  // Same, with the caller's scratch memory: passes that reuse one workspace allocate no activations
  // once it has grown to their size. The overloads above use the model's own workspace.
  void forward_batch(const std::vector<BatchInput>& inputs, Workspace& ws);

  void embed(const int32_t* tokens, int64_t n, float* x) const;  // x (n, hidden)

 private:
  TextConfig cfg_;
  TextWeights w_;
  ThreadPool& pool_;
  Workspace workspace_;
};

}  // namespace m3
