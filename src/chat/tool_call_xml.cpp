#include "m3/chat/tool_call_xml.h"

namespace m3::chat {
namespace {

void write_value(XmlSink& out, const Json& v);

void write_element(XmlSink& out, std::string_view key, const Json& v) {
  out.markup(kNamespace);
  out.markup("<");
  out.text(key);  // keys come from the client
  out.markup(">");
  write_value(out, v);
  out.markup(kNamespace);
  out.markup("</");
  out.text(key);
  out.markup(">");
}

void write_value(XmlSink& out, const Json& v) {
  if (v.is_object()) {
    for (const auto& [key, child] : v.items()) {
      if (!child.is_null()) write_element(out, key, child);
    }
  } else if (v.is_array()) {
    for (const Json& item : v) write_element(out, "item", item);
  } else if (v.is_string()) {
    out.text(v.get_ref<const std::string&>());
  } else {
    out.text(v.dump(-1, ' ', false, Json::error_handler_t::replace));  // numbers, true/false, null
  }
}

struct StringSink : XmlSink {
  std::string s;
  void markup(std::string_view t) override { s += t; }
  void text(std::string_view t) override { s += t; }
};

}  // namespace

void write_tool_call_block(XmlSink& out, const std::vector<ToolCallXml>& calls) {
  out.markup(kNamespace);
  out.markup("<tool_call>\n");
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) out.markup("\n");
    out.markup(kNamespace);
    out.markup("<invoke name=\"");
    out.text(calls[i].name);
    out.markup("\">");
    write_value(out, calls[i].arguments);
    out.markup(kNamespace);
    out.markup("</invoke>");
  }
  out.markup("\n");
  out.markup(kNamespace);
  out.markup("</tool_call>");
}

void write_tool_call_example(XmlSink& out) {
  // Our own example (the official one was not retrieved): one string, one object and one array
  // parameter, so the model sees every expansion rule once.
  const Json args = Json::parse(R"({"param_1": "value", "param_2": {"key": "value"}, "param_3": ["item_1", "item_2"]})");
  std::vector<ToolCallXml> calls{{"tool_name", args}};
  // The example is template text, not client text: all of it is markup.
  struct MarkupOnly : XmlSink {
    XmlSink& to;
    explicit MarkupOnly(XmlSink& t) : to(t) {}
    void markup(std::string_view s) override { to.markup(s); }
    void text(std::string_view s) override { to.markup(s); }
  } sink(out);
  write_tool_call_block(sink, calls);
}

std::string tool_call_block_text(const std::vector<ToolCallXml>& calls) {
  StringSink sink;
  write_tool_call_block(sink, calls);
  return sink.s;
}

}  // namespace m3::chat
