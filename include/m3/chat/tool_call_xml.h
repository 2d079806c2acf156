#pragma once
// Writes tool calls in M3's namespaced XML (spec §7.1): the renderer uses it for assistant
// history and for the example in the tools block; tests use it to build model outputs.
#include <string>
#include <string_view>
#include <vector>

#include "m3/chat/m3_format.h"

namespace m3::chat {

// Receives template markup (may hold control tokens) and client-written text separately.
struct XmlSink {
  virtual ~XmlSink() = default;
  virtual void markup(std::string_view s) = 0;
  virtual void text(std::string_view s) = 0;
};

struct ToolCallXml {
  std::string name;
  Json arguments;  // a JSON object
};

// NS<tool_call>\n + invokes joined by \n + \nNS</tool_call>. Parameters: NS<key>VALUE NS</key>;
// objects recurse, arrays become NS<item> sequences, strings raw, numbers and booleans as JSON,
// null members of objects are omitted (a null array item is written as "null").
void write_tool_call_block(XmlSink& out, const std::vector<ToolCallXml>& calls);

// The example call block that ends the tools section of the developer turn.
void write_tool_call_example(XmlSink& out);

// The whole block as one string (markup and text concatenated).
std::string tool_call_block_text(const std::vector<ToolCallXml>& calls);

}  // namespace m3::chat
