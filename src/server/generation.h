#pragma once
// One request's generation as the scheduler drives it, a step at a time: the runtime's decode loop
// (TokenGenerator: sampling, budgets, JSON mode, end of turn, stop strings) plus what HTTP adds: the
// streaming output parser (reasoning, tool calls), logprobs, SSE chunks, and the final response
// with usage. It never touches the model or the cache: the scheduler feeds it the logits of its
// sequence and hands back what to feed next.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "m3/chat/output_parser.h"
#include "m3/generation.h"
#include "server/exchange.h"
#include "server/metrics.h"
#include "m3/tokenizer.h"

namespace m3::server {

// The choices of a request with n > 1 share one exchange. Each adds its choice and usage here when
// it ends; the last one writes the response (or the stream's usage chunk and [DONE]). A failing
// choice ends the whole request with its error and cancels the others.
struct ChoiceGroup {
  explicit ChoiceGroup(int n) : remaining(n), choices(size_t(n)) {}
  std::mutex mu;
  int remaining;
  bool ended = false;          // the exchange was finished early (a choice failed)
  std::vector<Json> choices;   // non-streaming: each choice's object, by index
  int64_t completion_tokens = 0, reasoning_tokens = 0;
  int64_t cached_tokens = -1;  // the least any choice reused (each prefills the prompt itself)
};

class Generation {
 public:
  // sample_vocab: ids the tokenizer can decode (the model's vocabulary may be padded past them).
  // index, group: choice `index` of a request with n > 1 (it samples with seed + index).
  Generation(std::shared_ptr<const Job> job, std::shared_ptr<Exchange> exchange, const Tokenizer& tokenizer,
             int sample_vocab, int index = 0, std::shared_ptr<ChoiceGroup> group = nullptr);

  const Job& job() const { return *job_; }
  bool cancelled() const { return ex_->cancelled.load(); }
  const ChoiceGroup* group() const { return group_.get(); }  // n > 1 only
  int index() const { return index_; }

  // The request got its cache, `reused` prompt tokens of it from the prefix cache; sends the
  // stream's opening chunk.
  void start(int64_t reused);
  // After start(): how many prompt tokens this generation did not prefill after all (it waited for
  // a sibling choice and copied its cache, or got a cache later): usage and metrics.
  void set_reused(int64_t tokens) { reused_ = tokens; }
  // `logits` are those of the last token fed (the prompt's, then the previous step's): samples a
  // token and handles it, plus any tokens the thinking budget forces after it (the closer of a
  // thought at the reasoning cap). Returns false when the generation is over (end of turn, stop
  // string, max_tokens); otherwise `feed` holds the tokens to feed next.
  bool step(const float* logits, std::vector<int32_t>& feed);
  // Ends the request: the final chunks and usage (or the whole response), and the metrics.
  // cancelled: the client went away (no response is written).
  void complete(Metrics& metrics, bool cancelled);
  // Ends the request with a 500 (the engine failed): the error as a last SSE event or the body.
  void fail(const std::string& what);
  // Ends the request with a 503 because the server is shutting down (its grace period is over):
  // the error as the last SSE event, then [DONE], or as the body.
  void abort_for_shutdown();

  // Prompt and generated tokens whose K/V the sequence's cache holds once it stops (every
  // generated token but the last, which is never fed back).
  std::vector<int32_t> cached_tokens() const;

 private:
  void end_with_error(int status, const Json& error);
  void chunk(Json delta_or_text, const Json& finish_reason);
  void emit_deltas(const std::vector<chat::ChatDelta>& ds);
  void emit_text(const std::string& s);
  Json base_object(const char* object) const;
  Json logprob_entry(const float* logits, int32_t id) const;

  std::shared_ptr<const Job> job_;
  std::shared_ptr<Exchange> ex_;
  const int index_;
  std::shared_ptr<ChoiceGroup> group_;
  const Tokenizer& tok_;
  const int sample_vocab_;
  const bool chat_, stream_;

  TokenGenerator gen_;
  chat::OutputParser parser_;
  std::vector<TokenEvent> events_;
  std::string text_;  // completions: the whole output
  Json logprobs_ = Json::array();  // chat with logprobs: one entry per generated token (non-streaming)
  Json pending_logprob_;           // streaming: the entry of the token being emitted, sent with its first chunk
  int64_t reused_ = 0;
  std::chrono::steady_clock::time_point started_, first_token_, last_token_;
  std::vector<double> gaps_;  // seconds between consecutive sampled tokens (the inter-token histogram)
};

}  // namespace m3::server
