#pragma once
// The whole response side of the M3 chat format: decoded text pieces in, OpenAI-shaped deltas
// out. Pipeline: UTF-8 re-chunking -> reasoning split -> tool calls found in the content.
//
//   OutputParser p({.starts_in_reasoning = prompt.opens_reasoning, .tools = request["tools"]});
//   for each decoded piece: for (auto& d : p.push(piece)) send_chunk(d.to_json());
//   for (auto& d : p.finish()) send_chunk(d.to_json());
//   p.message().to_json()   // the assembled assistant message (non-streaming responses)
//
// One-shot parsing is push(all) + finish(), so streamed and one-shot results are identical by
// construction (the tests check it over many chunkings).
#include <string_view>
#include <vector>

#include "m3/chat/chat_delta.h"
#include "m3/chat/reasoning_parser.h"
#include "m3/chat/tool_call_parser.h"
#include "m3/chat/utf8_stream.h"

namespace m3::chat {

struct OutputParserOptions {
  bool starts_in_reasoning = false;  // RenderedPrompt::opens_reasoning
  bool parse_reasoning = true;       // false: reasoning markers are left in the content
  bool parse_tool_calls = true;      // false (e.g. tool_choice "none"): blocks stay content
  Json tools;                        // the request's tools, to type argument values
  ToolCallIdGenerator call_ids;      // empty: random_call_ids()
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options = {});

  std::vector<ChatDelta> push(std::string_view text);
  std::vector<ChatDelta> finish();  // once, at the end of generation

  // Everything emitted so far, assembled (after finish(): the final message).
  const ParsedMessage& message() const { return message_; }

 private:
  std::vector<ChatDelta> run(std::string_view text, bool at_end);

  OutputParserOptions options_;
  Utf8Stream utf8_;
  ReasoningParser reasoning_;
  ToolCallParser tools_;
  ParsedMessage message_;
  bool finished_ = false;
};

// push(text) + finish() on a fresh parser.
ParsedMessage parse_output(std::string_view text, OutputParserOptions options = {});

}  // namespace m3::chat
