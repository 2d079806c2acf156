#pragma once
// Finds M3 tool calls in the content stream (spec §7.2) and turns them into OpenAI tool_calls:
//
//   NS<tool_call>  NS<invoke name="F"> NS<key>VALUE NS</key> ... NS</invoke> ...  NS</tool_call>
//
// (NS = "]<]minimax[>[", whitespace allowed between elements and between NS and "<"). Text outside
// blocks is content. For each invoke the parser emits the id and name first, then argument
// fragments as parameters complete (string-typed parameters as their text arrives); the
// fragments of one call concatenate to exactly its final arguments JSON (compact, keys in the
// order written, the first of duplicate keys wins).
//
// Input must be whole UTF-8 characters per piece (OutputParser guarantees it). A partial trigger
// at the end of a piece is held back, never leaked as content. Malformed markup inside a block is
// skipped, never thrown. finish() on an unfinished block: see docs/CHAT_FORMAT.md.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "m3/chat/chat_delta.h"
#include "m3/chat/tool_arguments.h"

namespace m3::chat {

// Produces the id of each new call, e.g. "call_8Zb3...".
using ToolCallIdGenerator = std::function<std::string()>;
// "call_" + 24 random alphanumerics from a generator owned by the returned function.
ToolCallIdGenerator random_call_ids();
// "call_0", "call_1", ... (deterministic, for tests and reproducible runs).
ToolCallIdGenerator counting_call_ids(std::string prefix = "call_");

class ToolCallParser {
 public:
  // tools: the request's OpenAI tools (null or array), used to type argument values.
  explicit ToolCallParser(const Json& tools, ToolCallIdGenerator ids = random_call_ids());

  void push(std::string_view text, DeltaList& out);
  void finish(DeltaList& out);

  // The output ended inside a tool-call block.
  bool truncated() const { return truncated_; }
  // Index of the call that finish() had to close (its arguments keep only complete parameters),
  // or -1.
  int incomplete_call() const { return incomplete_call_; }

 private:
  struct Tag;
  void process(bool at_end, DeltaList& out);
  bool process_text(size_t& pos, bool at_end, DeltaList& out);
  bool process_string_param(size_t& pos, bool at_end, DeltaList& out);
  bool process_block(size_t& pos, bool at_end, DeltaList& out);
  void on_text(std::string_view s);
  void on_tag(const Tag& tag, std::string_view raw, DeltaList& out);
  void start_invoke(const std::string& name, DeltaList& out);
  void close_invoke(DeltaList& out);
  void start_param(const std::string& key, bool self_closing, DeltaList& out);
  void finish_param(DeltaList& out);
  void close_block(DeltaList& out);
  void emit_arguments(std::string fragment, DeltaList& out);

  ToolSchemas schemas_;
  ToolCallIdGenerator ids_;
  std::string buf_;  // input not yet consumed (a possible marker waiting for more text)

  bool in_block_ = false;
  bool block_has_invoke_ = false;
  std::string block_raw_;  // the block's text while it has no invoke (returned as content if none comes)

  bool in_invoke_ = false;
  int call_index_ = -1;
  int calls_ = 0;
  const Json* params_schema_ = nullptr;
  bool args_open_ = false;  // "{" emitted
  std::vector<std::string> seen_keys_;

  bool in_param_ = false;
  bool param_streams_string_ = false;
  bool param_skipped_ = false;  // a duplicate key: parsed, then dropped
  std::string param_key_;
  XmlNode param_root_;
  std::vector<XmlNode*> stack_;  // open elements of the parameter, root first

  bool truncated_ = false;
  int incomplete_call_ = -1;
};

}  // namespace m3::chat
