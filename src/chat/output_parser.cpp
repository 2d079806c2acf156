#include "m3/chat/output_parser.h"

#include <utility>

#include "m3/error.h"

namespace m3::chat {

OutputParser::OutputParser(OutputParserOptions options)
    : options_(std::move(options)),
      reasoning_(options_.starts_in_reasoning),
      tools_(options_.tools, options_.call_ids) {}

std::vector<ChatDelta> OutputParser::push(std::string_view text) {
  M3_CHECK(!finished_, "OutputParser: push() after finish()");
  return run(utf8_.push(text), false);
}

std::vector<ChatDelta> OutputParser::finish() {
  M3_CHECK(!finished_, "OutputParser: finish() called twice");
  finished_ = true;
  return run(utf8_.flush(), true);
}

std::vector<ChatDelta> OutputParser::run(std::string_view text, bool at_end) {
  // Stage 1: reasoning vs content.
  DeltaList split;
  if (options_.parse_reasoning) {
    reasoning_.push(text, split);
    if (at_end) reasoning_.finish(split);
  } else {
    split.content(text);
  }
  // Stage 2: tool calls inside the content, keeping the order of everything.
  DeltaList out;
  for (ChatDelta& d : split.items) {
    if (!d.reasoning_content.empty()) {
      out.reasoning(d.reasoning_content);
    } else if (options_.parse_tool_calls) {
      tools_.push(d.content, out);
    } else {
      out.content(d.content);
    }
  }
  if (at_end && options_.parse_tool_calls) {
    tools_.finish(out);
    message_.tool_call_truncated = tools_.truncated();
  }
  for (const ChatDelta& d : out.items) message_.apply(d);
  if (at_end && tools_.incomplete_call() >= 0 && tools_.incomplete_call() < static_cast<int>(message_.tool_calls.size())) {
    message_.tool_calls[tools_.incomplete_call()].complete = false;
  }
  return std::move(out.items);
}

ParsedMessage parse_output(std::string_view text, OutputParserOptions options) {
  OutputParser p(std::move(options));
  p.push(text);
  p.finish();
  return p.message();
}

}  // namespace m3::chat
