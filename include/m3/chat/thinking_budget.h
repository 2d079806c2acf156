#pragma once
// Thinking effort: how much a reply may reason before it must answer.
//
// parse_reasoning_effort maps OpenAI's `reasoning_effort` (or an explicit token count) to the
// template's thinking mode plus a cap on reasoning tokens (docs/CHAT_FORMAT.md, "Thinking effort").
// ThinkingBudget enforces the cap inside any token loop: feed it every token appended to the
// sequence after the prompt, sampled or forced; when the cap is reached inside a thought it returns
// the tokens to force next (the closer `</mm:think>`), so the model goes on with the answer.
//
//   ThinkingBudget budget(markers, effort.max_reasoning_tokens, rendered.opens_reasoning);
//   pending = budget.begin();                     // non-empty only for a zero budget
//   loop: id = pending.empty() ? sample() : pop(pending);
//         append(id); for (t : budget.on_token(id)) pending.push_back(t);
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "m3/chat/m3_format.h"

namespace m3 {
class Tokenizer;
}

namespace m3::chat {

struct ThinkingEffort {
  ThinkingMode mode = ThinkingMode::Adaptive;
  std::optional<int64_t> max_reasoning_tokens;  // nullopt: no cap (max_tokens still applies)
};

// Reasoning tokens allowed by the named efforts that cap thinking.
inline constexpr int64_t kLowEffortReasoningTokens = 1024;
inline constexpr int64_t kMediumEffortReasoningTokens = 4096;

// "none" | "minimal" | "low" | "medium" | "high" | "xhigh", or a decimal token count N >= 0
// (0: thinking disabled; N > 0: thinking enabled, at most N reasoning tokens). The modes of the
// names match thinking_mode_from_reasoning_effort. Anything else is an m3::Error naming `field`.
ThinkingEffort parse_reasoning_effort(std::string_view effort, std::string_view field);

// Ids of `<mm:think>` and `</mm:think>` (single tokens in M3's vocabulary, spec §7.2).
struct ThinkingMarkers {
  int32_t open = -1;
  int32_t close = -1;
  // Looked up by content; an m3::Error when the tokenizer lacks either marker.
  static ThinkingMarkers from_tokenizer(const Tokenizer& tokenizer);
};

class ThinkingBudget {
 public:
  enum class Phase {
    Start,     // nothing generated yet and the prompt did not open a thought
    Thinking,  // inside the thought: tokens count against the cap
    Answer,    // after the thought (or no thought at all): nothing is counted any more
  };

  // max_reasoning_tokens: nullopt for no cap (the state machine then only counts).
  // prompt_opened: the generation prefix ended with `<mm:think>` (RenderedPrompt::opens_reasoning).
  ThinkingBudget(ThinkingMarkers markers, std::optional<int64_t> max_reasoning_tokens, bool prompt_opened);

  // Tokens to force before anything is sampled: the closer when the prompt opened a thought and
  // the cap is 0; else none.
  std::vector<int32_t> begin();
  // Every token appended after the prompt, in order, including the forced ones (which are checked
  // against what was asked for and never counted). Returns the tokens to force next.
  std::vector<int32_t> on_token(int32_t id);

  Phase phase() const { return phase_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }  // markers and forced tokens excluded
  bool capped() const { return capped_; }                           // the cap closed the thought

 private:
  std::vector<int32_t> close_thought();

  ThinkingMarkers markers_;
  std::optional<int64_t> cap_;
  Phase phase_;
  bool first_ = true;  // no token seen yet
  int64_t reasoning_tokens_ = 0;
  bool capped_ = false;
  std::vector<int32_t> pending_;  // forced tokens not yet fed back through on_token
  size_t pending_pos_ = 0;
};

}  // namespace m3::chat
