#pragma once
// The generation loop of one sequence: chunked prefill, then token-by-token decode.
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "chat/thinking_budget.h"
#include "memory/kv_cache.h"
#include "model/text_model.h"
#include "runtime/sampler.h"

namespace m3 {

struct GenerateOptions {
  int max_new_tokens = 64;
  int prefill_chunk = 512;            // tokens per prefill forward pass
  std::vector<int32_t> stop_tokens;   // e.g. the end-of-turn token "[e~["
  // Sample only ids below this (the tokenizer's size: embedding rows past it, like M3's padding
  // ids 200061-200063, have no text). 0: the whole vocabulary.
  int sample_vocab = 0;
  // (prompt.size(), hidden) input embeddings for a multimodal prompt (see multimodal_prompt.h);
  // nullptr: embed the prompt ids.
  const float* prompt_embeddings = nullptr;
  SamplingParams sampling;
  // Caps reasoning: every generated token is fed to it, and the tokens it returns (the closing
  // `</mm:think>` at the cap) are fed to the model and reported through on_token in place of
  // sampling; they count as generated tokens. nullptr: every token is sampled.
  chat::ThinkingBudget* thinking_budget = nullptr;
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  bool stopped_by_token = false;
  int64_t forced_tokens = 0;  // generated tokens that thinking_budget forced instead of sampling
  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0.0; }
  // Decode speed counts the forward passes after the first sampled token.
  double decode_tokens_per_second() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0.0;
  }
};

// Prefill `prompt` into `cache` (which may already hold earlier tokens), then sample up to
// max_new_tokens. on_token is called for every generated token (stop tokens included); returning
// false ends generation. Progress of long prefills goes to on_prefill(done, total).
GenerateStats generate(TextModel& model, KvCache& cache, const std::vector<int32_t>& prompt,
                       const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token,
                       const std::function<void(int64_t, int64_t)>& on_prefill = {});

// Prefill in chunks; returns the logits of the last token. Shared by generate and `m3 logits`.
void prefill(TextModel& model, KvCache& cache, const int32_t* tokens, int64_t n, int chunk, LogitsFor which,
             std::vector<float>& logits, const std::function<void(int64_t, int64_t)>& on_progress = {});

}  // namespace m3
