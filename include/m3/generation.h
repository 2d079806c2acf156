#pragma once
// The runtime's one decode loop, a step at a time: what happens between the logits of the last
// token fed and the tokens to feed next. Sampling (penalties, logit_bias), the thinking budget
// (it forces the closer of a thought at the cap), JSON mode (only tokens that keep the answer a
// JSON object prefix), the end-of-turn token, stop strings, max_tokens, and the text of the
// output (UTF-8 whole, stop strings cut). It never touches the model or a cache: `Session` drives it
// for `m3 generate` and `m3 chat` (one sequence, prefix reuse), the server's scheduler for many
// sequences (m3/batch.h) batched into one forward pass per step.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "m3/chat/json_prefix.h"
#include "m3/chat/thinking_budget.h"
#include "m3/sampling.h"
#include "m3/tokenizer.h"

namespace m3 {

class Sampler;
class StopStringFilter;

// Chat replies: reasoning between `<mm:think>` and `</mm:think>` is counted and may be capped.
struct ReasoningOptions {
  bool prompt_opened = false;  // the prompt ends inside an open thought
  bool may_open = false;       // adaptive thinking: the reply may start with a thought (JSON mode lets it)
  std::optional<int64_t> max_tokens;  // cap on reasoning tokens; nullopt: only count them
};

struct GenerationConfig {
  int64_t max_tokens = 64;     // generated tokens, forced ones and the end-of-turn included
  SamplingParams sampling;
  // Sample only ids below this (ids the tokenizer can decode: M3's embedding is padded past them).
  // 0: the tokenizer's vocabulary.
  int sample_vocab = 0;
  bool stop_at_end_of_turn = true;  // false: `[e~[` is text like any other (--ignore-eos)
  std::vector<std::string> stop;    // stop strings (OpenAI `stop`): not part of the text
  std::optional<ReasoningOptions> reasoning;  // chat: count (and cap) the thought
  bool json_object = false;         // response_format json_object: the answer is one JSON object
};

enum class FinishReason {
  None,        // still running (or stopped by the caller)
  EndOfTurn,   // the model ended its turn, or JSON mode closed the object
  StopString,  // a stop string appeared
  Length,      // max_tokens
};

// One generated token and the text it releases (empty while UTF-8 bytes, a possible stop string
// or nothing at all are pending; never the end-of-turn token's).
struct TokenEvent {
  int32_t id = -1;
  bool sampled = false;      // false: forced by the thinking budget (no logits of its own)
  bool end_of_turn = false;  // the turn ends here: the last event
  std::string text;
};

class TokenGenerator {
 public:
  // prompt: the ids before the first generated token (the repetition penalty's history).
  TokenGenerator(const Tokenizer& tokenizer, GenerationConfig config, std::vector<int32_t> prompt);
  ~TokenGenerator();
  TokenGenerator(const TokenGenerator&) = delete;
  TokenGenerator& operator=(const TokenGenerator&) = delete;

  // `logits` (the model's vocabulary) are those of the last token fed: the prompt's, then the last
  // step's feed. Appends the step's tokens to `events` (the sampled one, then any the thinking
  // budget forces after it) and sets `feed` to the tokens to feed next. Returns false when the
  // generation is over (finish_reason() says why); `feed` is then empty or not needed.
  bool step(const float* logits, std::vector<TokenEvent>& events, std::vector<int32_t>& feed);
  // At the end (whatever ended it): the text still held back (an incomplete UTF-8 tail, a partial
  // stop string), unless a stop string cut the output.
  std::string finish();

  FinishReason finish_reason() const { return reason_; }
  const std::vector<int32_t>& generated() const { return generated_; }  // end-of-turn included
  int64_t forced_tokens() const { return forced_; }
  int64_t reasoning_tokens() const { return budget_ ? budget_->reasoning_tokens() : 0; }
  // Generated tokens the last step returned in `feed`: the cache lacks them until they are fed.
  int64_t unfed() const { return unfed_; }
  const GenerationConfig& config() const { return cfg_; }

 private:
  int32_t sample(const float* logits);
  bool accept(int32_t id, bool sampled, std::vector<TokenEvent>& events);

  const Tokenizer& tok_;
  const GenerationConfig cfg_;
  const int vocab_;
  const int32_t end_of_turn_;
  const size_t output_start_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<int32_t> history_;  // prompt + generated
  std::vector<int32_t> generated_;
  std::vector<int32_t> pending_forced_;  // the budget's begin(): forced before anything is sampled
  StreamingDecoder decoder_;
  std::unique_ptr<StopStringFilter> stops_;
  std::optional<chat::ThinkingBudget> budget_;
  std::optional<chat::JsonPrefix> json_;
  std::vector<std::string> token_text_;  // json_: the bytes of every sampleable token
  std::vector<float> masked_;            // json_: logits with the refused tokens at -inf
  int64_t forced_ = 0, unfed_ = 0;
  FinishReason reason_ = FinishReason::None;
};

}  // namespace m3
