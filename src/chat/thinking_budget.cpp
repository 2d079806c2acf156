#include "m3/chat/thinking_budget.h"

#include <string>

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "m3/tokenizer.h"

namespace m3::chat {

ThinkingEffort parse_reasoning_effort(std::string_view effort, std::string_view field) {
  ThinkingEffort e;
  const bool numeric = !effort.empty() && effort.find_first_not_of("0123456789") == std::string_view::npos;
  if (numeric) {
    // Ten digits would pass 2^31; no reply is that long anyway.
    M3_CHECK(effort.size() <= 9, field, ": reasoning token budget ", effort, " is too large (at most 999999999)");
    const int64_t n = std::stoll(std::string(effort));
    e.mode = n == 0 ? ThinkingMode::Disabled : ThinkingMode::Enabled;
    e.max_reasoning_tokens = n;
    return e;
  }
  if (effort != "none" && effort != "minimal" && effort != "low" && effort != "medium" && effort != "high" &&
      effort != "xhigh")
    fail(field, ": unknown reasoning effort \"", effort,
         "\" (expected none, minimal, low, medium, high, xhigh or a token count)");
  e.mode = thinking_mode_from_reasoning_effort(effort, field);
  if (effort == "none" || effort == "minimal") e.max_reasoning_tokens = 0;
  if (effort == "low") e.max_reasoning_tokens = kLowEffortReasoningTokens;
  if (effort == "medium") e.max_reasoning_tokens = kMediumEffortReasoningTokens;
  return e;
}

ThinkingMarkers ThinkingMarkers::from_tokenizer(const Tokenizer& tokenizer) {
  ThinkingMarkers m;
  m.open = tokenizer.require_token(kThinkOpen);
  m.close = tokenizer.require_token(kThinkClose);
  return m;
}

ThinkingBudget::ThinkingBudget(ThinkingMarkers markers, std::optional<int64_t> max_reasoning_tokens,
                               bool prompt_opened)
    : markers_(markers), cap_(max_reasoning_tokens), phase_(prompt_opened ? Phase::Thinking : Phase::Start) {
  M3_CHECK(!cap_ || *cap_ >= 0, "thinking budget must be >= 0, got ", *cap_);
}

std::vector<int32_t> ThinkingBudget::close_thought() {
  // The template writes the answer right after `</mm:think>` (no separator, spec §7.1), so the
  // closer alone hands over to the answer exactly as a naturally closed thought would.
  capped_ = true;
  phase_ = Phase::Answer;
  pending_ = {markers_.close};
  pending_pos_ = 0;
  return pending_;
}

std::vector<int32_t> ThinkingBudget::begin() {
  if (phase_ == Phase::Thinking && cap_ && *cap_ == 0 && pending_.empty()) return close_thought();
  return {};
}

std::vector<int32_t> ThinkingBudget::on_token(int32_t id) {
  if (pending_pos_ < pending_.size()) {
    M3_CHECK(id == pending_[pending_pos_], "ThinkingBudget: expected the forced token ", pending_[pending_pos_],
             ", got ", id);
    ++pending_pos_;
    first_ = false;
    return {};
  }
  const bool first = first_;
  first_ = false;
  switch (phase_) {
    case Phase::Start:
      // Not opened by the prompt: only a leading `<mm:think>` starts a thought (as in the output
      // parser); a leading stray `</mm:think>` or any other token means the model answers directly.
      if (id != markers_.open) {
        phase_ = Phase::Answer;
        return {};
      }
      phase_ = Phase::Thinking;
      if (cap_ && *cap_ == 0) return close_thought();
      return {};
    case Phase::Thinking:
      if (id == markers_.close) {
        phase_ = Phase::Answer;
        return {};
      }
      if (first && id == markers_.open) return {};  // redundant opener after an opening prefix
      ++reasoning_tokens_;
      if (cap_ && reasoning_tokens_ >= *cap_) return close_thought();
      return {};
    case Phase::Answer:
      return {};
  }
  return {};
}

}  // namespace m3::chat
