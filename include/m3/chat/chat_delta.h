#pragma once
// OpenAI-shaped streaming deltas (the "delta" of a chat.completion.chunk) and the assembled
// assistant message. Each ChatDelta carries one kind of payload, in the order the model wrote it.
#include <string>
#include <string_view>
#include <vector>

#include "m3/chat/m3_format.h"

namespace m3::chat {

struct ToolCallDelta {
  int index = 0;
  std::string id;         // set (with name) only in the first delta of a call
  std::string name;
  std::string arguments;  // a fragment; the fragments of one call concatenate to its arguments
};

struct ChatDelta {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCallDelta> tool_calls;

  // {"content": ...} / {"reasoning_content": ...} / {"tool_calls": [{index, id, type, function}]}.
  Json to_json() const;
};

// Appends to a delta list, growing the last delta when it has the same kind (and, for tool
// calls, the same call) so that one push yields as few deltas as possible.
struct DeltaList {
  std::vector<ChatDelta> items;
  void content(std::string_view s);
  void reasoning(std::string_view s);
  void tool_call(ToolCallDelta d);
};

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text
  bool complete = true;   // false: closed by finish() after the output stopped mid-call
};

struct ParsedMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ParsedToolCall> tool_calls;
  // The output ended inside a tool-call block (see docs/CHAT_FORMAT.md for what is kept).
  bool tool_call_truncated = false;

  void apply(const ChatDelta& d);
  // OpenAI assistant message: role, content (null when empty and there are tool calls),
  // reasoning_content (when non-empty), tool_calls (when any).
  Json to_json() const;
};

}  // namespace m3::chat
