#pragma once
// One conversation (or one prompt) on one KV cache: the decode loop (TokenGenerator, m3/generation.h)
// over a Batch of one sequence (m3/batch.h), for `m3 generate` and `m3 chat`. Each call reuses the
// longest prefix the cache shares with the new prompt (keys compared, media rows included:
// m3/prompt.h), prefills the rest in chunks (media rows as input rows), then decodes until the
// generator stops or a callback says so. What the cache holds afterwards is kept for the next call.
// The server runs the same two pieces with many sequences per batch.
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "m3/batch.h"
#include "m3/dtype.h"
#include "m3/engine.h"
#include "m3/generation.h"
#include "m3/prompt.h"

namespace m3 {

struct SessionOptions {
  DType cache_type = DType::BF16;  // K, V and index-K element type (--cache-type): BF16, F32 or F8_E4M3
  int prefill_chunk = 512;        // tokens per prefill forward pass
  bool reuse_prefix = true;       // false: every call starts from an empty cache (for comparisons)
  // Most tokens the sequence may hold, prompt and generated (-c/--ctx-size), which bounds the
  // cache's memory. 0: the model's max_position_embeddings. A longer prompt is an error; the
  // generation stops (finish Length, context_full) when it fills the context.
  int64_t context = 0;
};

struct SessionCallbacks {
  std::function<void(std::string_view)> on_text;    // the output text, as it is released
  std::function<bool(const TokenEvent&)> on_token;  // every generated token; false: stop after it
  // After every prefill chunk (done of total prompt tokens to prefill); false before the last
  // chunk stops the call there (the chunks done stay cached).
  std::function<bool(int64_t done, int64_t total)> on_prefill;
};

struct SessionStats {
  int64_t prompt_tokens = 0, reused_tokens = 0, prefilled_tokens = 0;
  int64_t generated_tokens = 0, forced_tokens = 0, reasoning_tokens = 0;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  FinishReason finish = FinishReason::None;
  bool interrupted = false;          // a callback stopped it
  bool prefill_interrupted = false;  // ... before the first token
  bool context_full = false;         // stopped because the context (SessionOptions::context) is full
  std::vector<int32_t> generated;    // end-of-turn included
  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prefilled_tokens / prefill_seconds : 0.0; }
  // Decode speed counts the forward passes after the first generated token.
  double decode_tokens_per_second() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0.0;
  }
};

class Session {
 public:
  Session(Engine& engine, SessionOptions options);

  // Prefills `prompt` (at least its last token, whose logits start the reply) and generates.
  // Throws what the model throws; the cache is then dropped and the next call starts from nothing.
  SessionStats generate(const Prompt& prompt, const GenerationConfig& config, const SessionCallbacks& callbacks);

  int64_t cached_tokens() const { return cached_; }  // positions the kept cache holds
  uint64_t cache_bytes() const { return batch_.prefix_cache_bytes(); }
  DType cache_type() const { return opt_.cache_type; }
  int64_t context() const;  // tokens the sequence may hold (SessionOptions::context resolved)

 private:
  SessionStats run(Batch::Id id, const Prompt& prompt, const GenerationConfig& config, const SessionCallbacks& cb,
                   SessionStats& stats);

  Engine& engine_;
  SessionOptions opt_;
  Batch batch_;  // one sequence at a time; its prefix cache keeps the last one
  int64_t cached_ = 0;
};

}  // namespace m3
