#pragma once
// Turns a tool-call parameter, as the model wrote it in namespaced XML, into a JSON value typed
// by the tool's JSON schema (spec §7.2): the schema type decides (integer, number, boolean, null,
// string; object/array from nested elements or a JSON text), then a JSON parse, then the raw text.
#include <string>
#include <string_view>
#include <vector>

#include "m3/chat/m3_format.h"

namespace m3::chat {

// One element of a parameter value: its text and its child elements, in order.
struct XmlNode {
  std::string name;
  std::string text;  // text directly inside, concatenated (whitespace between children included)
  std::vector<XmlNode> children;
};

// `schema` may be null (unknown tool or parameter): then JSON if the text parses, else the text.
Json typed_value(const XmlNode& node, const Json* schema);

// True when the schema admits only strings: such a parameter is streamed as it arrives and its
// value is the raw text between its tags.
bool is_string_only(const Json* schema);

// Parameter schemas of the request's tools, looked up by tool and parameter name.
class ToolSchemas {
 public:
  explicit ToolSchemas(const Json& tools);  // tolerant: entries without a usable schema are skipped
  const Json* parameters(std::string_view tool) const;                    // null if unknown
  static const Json* property(const Json* parameters, std::string_view key);  // null if unknown

 private:
  Json tools_;  // name -> parameters schema
};

}  // namespace m3::chat
