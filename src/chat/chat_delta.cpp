#include "m3/chat/chat_delta.h"

namespace m3::chat {

Json ChatDelta::to_json() const {
  Json j = Json::object();
  if (!content.empty()) j["content"] = content;
  if (!reasoning_content.empty()) j["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallDelta& d : tool_calls) {
      Json c{{"index", d.index}};
      if (!d.id.empty()) {
        c["id"] = d.id;
        c["type"] = "function";
      }
      Json fn = Json::object();
      if (!d.name.empty()) fn["name"] = d.name;
      fn["arguments"] = d.arguments;
      c["function"] = std::move(fn);
      calls.push_back(std::move(c));
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

void DeltaList::content(std::string_view s) {
  if (s.empty()) return;
  if (items.empty() || items.back().content.empty()) items.emplace_back();
  items.back().content += s;
}

void DeltaList::reasoning(std::string_view s) {
  if (s.empty()) return;
  if (items.empty() || items.back().reasoning_content.empty()) items.emplace_back();
  items.back().reasoning_content += s;
}

void DeltaList::tool_call(ToolCallDelta d) {
  if (d.id.empty() && d.name.empty() && d.arguments.empty()) return;
  if (items.empty() || items.back().tool_calls.empty()) items.emplace_back();
  auto& calls = items.back().tool_calls;
  if (!calls.empty() && calls.back().index == d.index && d.id.empty() && d.name.empty()) {
    calls.back().arguments += d.arguments;
  } else {
    calls.push_back(std::move(d));
  }
}

void ParsedMessage::apply(const ChatDelta& d) {
  content += d.content;
  reasoning_content += d.reasoning_content;
  for (const ToolCallDelta& t : d.tool_calls) {
    if (t.index >= static_cast<int>(tool_calls.size())) tool_calls.resize(t.index + 1);
    ParsedToolCall& c = tool_calls[t.index];
    if (!t.id.empty()) c.id = t.id;
    if (!t.name.empty()) c.name = t.name;
    c.arguments += t.arguments;
  }
}

Json ParsedMessage::to_json() const {
  Json j{{"role", "assistant"}};
  j["content"] = content.empty() && !tool_calls.empty() ? Json() : Json(content);
  if (!reasoning_content.empty()) j["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    Json calls = Json::array();
    for (const ParsedToolCall& c : tool_calls) {
      calls.push_back(Json{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

}  // namespace m3::chat
