#pragma once
// Splits model output into reasoning and content (spec §7.2). Works on decoded text pieces of any
// size; a marker split across pieces is recognised (its bytes are held back until decided).
//
// Rules: the output may open with <mm:think> (reasoning until </mm:think>); when the generation
// prefix already opened it (thinking_mode=enabled), the output starts inside reasoning and a
// redundant leading <mm:think> is dropped. Otherwise one </mm:think> at the very start is dropped
// (the model's way to say "no thinking"). After reasoning closes, everything is content, markers
// included. Unterminated reasoning stays reasoning.
#include <string>
#include <string_view>

#include "m3/chat/chat_delta.h"

namespace m3::chat {

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning = false);
  void push(std::string_view text, DeltaList& out);
  void finish(DeltaList& out);

 private:
  enum class State { Start, Reasoning, Content };
  State state_;
  bool at_start_ = true;  // nothing decided yet about the output's first bytes
  std::string held_;
};

}  // namespace m3::chat
