// Output parser (reasoning split + tool-call parser): the input is model output, streamed in
// chunks whose sizes the input chooses, with the request's tools typing argument values.
// Besides crashes, checks the parser's promise that streaming changes nothing: the message
// assembled from the streamed deltas equals a one-shot parse of the whole text, and every delta
// serializes as strict JSON.
//
// Input layout: [flags] [n] [n chunk sizes] [tools JSON] '\0' [model output]
//   flags bit 0: starts in reasoning, bit 1: reasoning markers left as content,
//         bit 2: tool calls not parsed (tool_choice "none").
//   chunk sizes: 1 + byte each, used in turn, cycling; n = 0: one chunk.
//   no '\0': no tools, everything after the sizes is model output.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "m3/chat/output_parser.h"
#include "fuzz_support.h"

namespace {

using m3::chat::Json;

// Strict serialization: the parser promises valid UTF-8 in every delta (utf8_stream.h), so a
// json type_error from invalid bytes escapes as an uncaught exception, i.e. a finding. (The
// server itself would paper over it with error_handler_t::replace.)
std::string dump(const Json& j) { return j.dump(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace m3::chat;
  m3::fuzz::ByteReader in(data, size);
  const uint8_t flags = in.byte();
  std::vector<size_t> chunks(in.byte());
  for (size_t& c : chunks) c = size_t(in.byte()) + 1;
  std::string_view text = in.rest();
  Json tools;
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    tools = Json::parse(text.substr(0, nul), nullptr, /*allow_exceptions=*/false);
    if (tools.is_discarded()) tools = Json();
    text.remove_prefix(nul + 1);
  }

  auto options = [&] {
    OutputParserOptions o;
    o.starts_in_reasoning = flags & 1;
    o.parse_reasoning = !(flags & 2);
    o.parse_tool_calls = !(flags & 4);
    o.tools = tools;
    o.call_ids = counting_call_ids();  // both parses must number calls alike
    return o;
  };
  try {
    OutputParser streamed(options());
    ParsedMessage from_deltas;
    auto take = [&](const std::vector<ChatDelta>& deltas) {
      for (const ChatDelta& d : deltas) {
        (void)dump(d.to_json());
        from_deltas.apply(d);
      }
    };
    size_t pos = 0;
    for (size_t i = 0; pos < text.size(); ++i) {
      const size_t n = chunks.empty() ? text.size() : chunks[i % chunks.size()];
      take(streamed.push(text.substr(pos, n)));
      pos += n;
    }
    take(streamed.finish());

    const std::string final_message = dump(streamed.message().to_json());
    if (dump(from_deltas.to_json()) != final_message)
      m3::fuzz::finding("the deltas do not add up to the parser's message:\n" + dump(from_deltas.to_json()) +
                        "\n" + final_message);
    const std::string one_shot = dump(parse_output(text, options()).to_json());
    if (one_shot != final_message)
      m3::fuzz::finding("streamed and one-shot parses differ:\n" + final_message + "\n" + one_shot);
    // Each call's arguments are promised to be one JSON object (the client parses them).
    for (const ParsedToolCall& call : streamed.message().tool_calls) {
      const Json args = Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
      if (!args.is_object()) m3::fuzz::finding("tool call arguments are not a JSON object: " + call.arguments);
    }
  } catch (const m3::Error&) {
  }
  return 0;
}
