#include "m3/chat/reasoning_parser.h"

#include "m3/chat/text_scan.h"

namespace m3::chat {

ReasoningParser::ReasoningParser(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::Reasoning : State::Start) {}

void ReasoningParser::push(std::string_view text, DeltaList& out) {
  held_.append(text);
  std::string_view s = held_;
  if (at_start_) {
    // The leading marker: <mm:think> opens reasoning (or is redundant if already inside);
    // a stray </mm:think> is dropped unless reasoning was opened by the prompt.
    const bool may_open = s.size() < kThinkOpen.size() ? kThinkOpen.starts_with(s) : s.starts_with(kThinkOpen);
    const bool may_close = state_ == State::Start &&
                           (s.size() < kThinkClose.size() ? kThinkClose.starts_with(s) : s.starts_with(kThinkClose));
    if ((may_open && s.size() < kThinkOpen.size()) || (may_close && s.size() < kThinkClose.size())) return;
    at_start_ = false;
    if (may_open) {
      s.remove_prefix(kThinkOpen.size());
      state_ = State::Reasoning;
    } else if (may_close) {
      s.remove_prefix(kThinkClose.size());
      state_ = State::Content;
    } else if (state_ == State::Start) {
      state_ = State::Content;
    }
  }
  if (state_ == State::Reasoning) {
    const size_t close = s.find(kThinkClose);
    if (close == std::string_view::npos) {
      const size_t keep = partial_marker_suffix(s, kThinkClose);
      out.reasoning(s.substr(0, s.size() - keep));
      held_ = std::string(s.substr(s.size() - keep));
      return;
    }
    out.reasoning(s.substr(0, close));
    s.remove_prefix(close + kThinkClose.size());
    state_ = State::Content;
  }
  out.content(s);
  held_.clear();
}

void ReasoningParser::finish(DeltaList& out) {
  // Whatever was held could not complete its marker: it is text of the current kind.
  if (state_ == State::Reasoning) {
    out.reasoning(held_);
  } else {
    out.content(held_);
  }
  held_.clear();
  at_start_ = false;
}

}  // namespace m3::chat
