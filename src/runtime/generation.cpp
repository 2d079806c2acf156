#include "m3/generation.h"

#include <cmath>

#include "m3/error.h"
#include "runtime/sampler.h"
#include "runtime/stop_strings.h"
#include "m3/chat/m3_format.h"

namespace m3 {

TokenGenerator::TokenGenerator(const Tokenizer& tokenizer, GenerationConfig config, std::vector<int32_t> prompt)
    : tok_(tokenizer),
      cfg_(std::move(config)),
      vocab_(cfg_.sample_vocab > 0 ? cfg_.sample_vocab : tokenizer.vocab_size()),
      end_of_turn_(tokenizer.token_id(chat::kTurnEnd).value_or(-1)),
      output_start_(prompt.size()),
      sampler_(std::make_unique<Sampler>(cfg_.sampling)),
      history_(std::move(prompt)),
      decoder_(tokenizer),
      stops_(std::make_unique<StopStringFilter>(cfg_.stop)) {
  M3_CHECK(cfg_.max_tokens >= 0, "max_tokens must be >= 0, got ", cfg_.max_tokens);
  if (cfg_.reasoning) {
    budget_.emplace(chat::ThinkingMarkers::from_tokenizer(tokenizer), cfg_.reasoning->max_tokens,
                    cfg_.reasoning->prompt_opened);
    pending_forced_ = budget_->begin();  // a zero cap closes the opened thought before anything is sampled
  }
  if (cfg_.json_object) {  // the text of every token the JSON mask may allow
    json_.emplace();
    token_text_.resize(size_t(vocab_));
    for (int t = 0; t < vocab_; ++t)
      if (t != end_of_turn_ && !tokenizer.is_special(t) && tokenizer.has_token(t))
        token_text_[size_t(t)] = tokenizer.token_bytes(t);
  }
}

TokenGenerator::~TokenGenerator() = default;

bool TokenGenerator::step(const float* logits, std::vector<TokenEvent>& events, std::vector<int32_t>& feed) {
  feed.clear();
  unfed_ = 0;  // the caller fed what the last step returned
  if (reason_ != FinishReason::None) return false;
  if (json_ && json_->complete()) {  // the object is closed: the answer ends here
    reason_ = FinishReason::EndOfTurn;
    return false;
  }
  std::vector<int32_t> next;
  bool sampled = pending_forced_.empty();
  if (sampled) next.push_back(sample(logits));
  else next.swap(pending_forced_);
  for (size_t i = 0; i < next.size(); ++i) {
    if (int64_t(generated_.size()) >= cfg_.max_tokens) {
      reason_ = FinishReason::Length;
      return false;
    }
    if (!accept(next[i], sampled && i == 0, events)) return false;
    feed.push_back(next[i]);
    if (budget_)
      for (int32_t forced : budget_->on_token(next[i])) next.push_back(forced);
  }
  if (int64_t(generated_.size()) >= cfg_.max_tokens) {
    reason_ = FinishReason::Length;
    return false;
  }
  return true;
}

bool TokenGenerator::accept(int32_t id, bool sampled, std::vector<TokenEvent>& events) {
  history_.push_back(id);
  generated_.push_back(id);
  ++unfed_;
  if (!sampled) ++forced_;
  TokenEvent ev;
  ev.id = id;
  ev.sampled = sampled;
  if (id == end_of_turn_ && cfg_.stop_at_end_of_turn) {
    ev.end_of_turn = true;
    events.push_back(std::move(ev));
    reason_ = FinishReason::EndOfTurn;
    return false;
  }
  ev.text = stops_->push(decoder_.push(id));
  events.push_back(std::move(ev));
  if (stops_->stopped()) {
    reason_ = FinishReason::StopString;
    return false;
  }
  return true;
}

std::string TokenGenerator::finish() {
  if (stops_->stopped()) return "";
  std::string text = stops_->push(decoder_.flush());
  if (stops_->stopped()) {
    reason_ = FinishReason::StopString;
    return text;
  }
  return text + stops_->finish();
}

int32_t TokenGenerator::sample(const float* logits) {
  using Phase = chat::ThinkingBudget::Phase;
  const Phase phase = budget_ ? budget_->phase() : Phase::Answer;
  if (!json_) return sampler_->sample(logits, vocab_, history_, output_start_);
  masked_.assign(logits, logits + vocab_);
  if (phase == Phase::Thinking) {  // the thought is free, but the turn may not end inside it
    if (end_of_turn_ >= 0 && end_of_turn_ < vocab_) masked_[size_t(end_of_turn_)] = -INFINITY;
    return sampler_->sample(masked_.data(), vocab_, history_, output_start_);
  }
  // Tokens that continue the JSON text (special tokens never do); before anything is generated,
  // with adaptive thinking, the model may still open a thought instead.
  const bool may_open = cfg_.reasoning && cfg_.reasoning->may_open;
  const int32_t think_open = phase == Phase::Start && may_open ? tok_.token_id(chat::kThinkOpen).value_or(-1) : -1;
  chat::mask_json_tokens(*json_, token_text_, masked_.data(), think_open);
  const int32_t id = sampler_->sample(masked_.data(), vocab_, history_, output_start_);
  if (id != think_open) json_->feed(token_text_[size_t(id)]);
  return id;
}

}  // namespace m3
