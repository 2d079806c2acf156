#include "m3/chat/chat_template.h"

#include <optional>

#include "m3/error.h"
#include "m3/chat/json_depth.h"
#include "m3/chat/tool_call_xml.h"
#include "m3/tokenizer.h"

namespace m3::chat {
namespace {

// Fixed texts of the system turn (spec §7.1, [MS] revision).
constexpr std::string_view kIdentity =
    "Your model version is MiniMax-M3, developed by MiniMax. Knowledge cutoff: January 2026. Founded in early "
    "2022, MiniMax is a global AI foundation model company committed to advancing the frontiers of AI towards "
    "AGI.";
constexpr std::string_view kThinkingBase =
    "You have a thinking capability that allows you to reason step by step before responding. When thinking is "
    "enabled, wrap your reasoning in <mm:think></mm:think> tags before your response. When thinking is disabled, "
    "begin your response directly after the </mm:think> prefix. When thinking is adaptive, decide on your own "
    "whether to think for the current turn.";
constexpr std::string_view kModeEnabled =
    "Current thinking mode: enabled. You MUST think step by step before every response, including after "
    "receiving function/tool results.";
constexpr std::string_view kModeDisabled = "Current thinking mode: disabled. Do not output any thinking process.";
constexpr std::string_view kModeAdaptive =
    "Current thinking mode: adaptive. You are encouraged to think for complex decision-making, multi-step "
    "reasoning, or when analyzing function/tool results.";
constexpr std::string_view kDefaultDeveloperText = "You are a helpful assistant.";
constexpr std::string_view kToolsIntro =
    "\n\n# Tools\nYou may call one or more tools to assist with the user query.\n"
    "Here are the tools available in JSONSchema format:\n\n<tools>\n";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nTo call tools, wrap all invocations in a single ]<]minimax[>[<tool_call>]<]minimax[>[</tool_call> "
    "block. Parameter values containing nested objects or arrays are recursively expanded into XML elements. "
    "Example:\n\n";

std::string_view mode_sentence(ThinkingMode mode) {
  switch (mode) {
    case ThinkingMode::Enabled: return kModeEnabled;
    case ThinkingMode::Disabled: return kModeDisabled;
    case ThinkingMode::Adaptive: return kModeAdaptive;
  }
  return kModeAdaptive;
}

// Appends markup and plain text, merging neighbours of the same kind.
class PromptBuilder : public XmlSink {
 public:
  explicit PromptBuilder(RenderedPrompt& out) : out_(out) {}
  void markup(std::string_view s) override { add(s, true); }
  void text(std::string_view s) override { add(s, false); }

 private:
  void add(std::string_view s, bool special) {
    if (s.empty()) return;
    if (!out_.segments.empty() && out_.segments.back().special == special) {
      out_.segments.back().text += s;
    } else {
      out_.segments.push_back(PromptSegment{std::string(s), special});
    }
  }
  RenderedPrompt& out_;
};

std::string field_at(std::string_view base, size_t i) { return str_cat(base, "[", i, "]"); }

const char* type_name(const Json& j) { return j.type_name(); }

// json.dumps(x) with Python's default separators (", " and ": ") and ensure_ascii=False, as the
// HF template's tojson filter writes tool schemas; key order is the client's.
void append_python_json(const Json& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      if (!first) out += ", ";
      first = false;
      out += Json(key).dump(-1, ' ', false, Json::error_handler_t::replace);
      out += ": ";
      append_python_json(value, out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      append_python_json(j[i], out);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

std::string required_string(const Json& obj, std::string_view key, const std::string& field) {
  auto it = obj.find(key);
  M3_CHECK(it != obj.end(), field, ".", key, ": missing");
  M3_CHECK(it->is_string(), field, ".", key, ": expected a string, got ", type_name(*it));
  return it->get<std::string>();
}

// Text of a content that may only hold text: a string, or an array of {type:"text"} parts joined
// without separator. null counts as empty.
std::string text_only_content(const Json& content, const std::string& field) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  M3_CHECK(content.is_array(), field, ": expected a string or an array of content parts, got ", type_name(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pf = field_at(field, i);
    M3_CHECK(part.is_object(), pf, ": expected an object, got ", type_name(part));
    const std::string type = required_string(part, "type", pf);
    M3_CHECK(type == "text" || type == "input_text", pf, ".type: \"", type,
             "\" is not allowed here (only text parts)");
    text += required_string(part, "text", pf);
  }
  return text;
}

// The URL of an image/video part; `inner` is "image_url" or "video_url" ({url} or a bare string).
std::string media_url(const Json& part, std::string_view inner, const std::string& pf, bool allow_file_id) {
  auto it = part.find(inner);
  if (it == part.end()) {
    M3_CHECK(allow_file_id && part.contains("file_id"), pf, ".", inner, ": missing");
    M3_CHECK(part["file_id"].is_string(), pf, ".file_id: expected a string");
    return {};
  }
  if (it->is_string()) return it->get<std::string>();
  M3_CHECK(it->is_object(), pf, ".", inner, ": expected an object or a string, got ", type_name(*it));
  return required_string(*it, "url", str_cat(pf, ".", inner));
}

// User and tool content: text parts as plain text, each image/video part as one placeholder.
void render_rich_content(PromptBuilder& b, RenderedPrompt& out, const Json& content, size_t msg_index,
                         const std::string& field) {
  if (content.is_string()) {
    b.text(content.get<std::string>());
    return;
  }
  M3_CHECK(content.is_array(), field, ": expected a string or an array of content parts, got ", type_name(content));
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pf = field_at(field, i);
    M3_CHECK(part.is_object(), pf, ": expected an object, got ", type_name(part));
    const std::string type = required_string(part, "type", pf);
    MediaRef media;
    if (type == "text" || type == "input_text") {
      b.text(required_string(part, "text", pf));
      continue;
    } else if (type == "image_url") {
      media.kind = MediaKind::Image;
      media.url = media_url(part, "image_url", pf, false);
    } else if (type == "input_image") {
      media.kind = MediaKind::Image;
      media.url = media_url(part, "image_url", pf, true);
    } else if (type == "video_url") {
      media.kind = MediaKind::Video;
      media.url = media_url(part, "video_url", pf, false);
    } else {
      fail(pf, ".type: unknown content part type \"", type,
           "\" (expected text, image_url, input_image or video_url)");
    }
    media.part = part;
    media.message_index = msg_index;
    media.part_index = i;
    out.media.push_back(std::move(media));
    b.markup(out.media.back().kind == MediaKind::Image ? kImagePlaceholder : kVideoPlaceholder);
  }
}

struct ToolInfo {
  std::string name;
  Json function;
};

std::vector<ToolInfo> validate_tools(const Json& tools) {
  std::vector<ToolInfo> out;
  if (tools.is_null()) return out;
  M3_CHECK(tools.is_array(), "tools: expected an array, got ", type_name(tools));
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string tf = field_at("tools", i);
    M3_CHECK(tool.is_object(), tf, ": expected an object, got ", type_name(tool));
    if (auto t = tool.find("type"); t != tool.end()) {
      M3_CHECK(t->is_string() && *t == "function", tf, ".type: expected \"function\"");
    }
    auto fn = tool.find("function");
    M3_CHECK(fn != tool.end(), tf, ".function: missing");
    M3_CHECK(fn->is_object(), tf, ".function: expected an object, got ", type_name(*fn));
    const std::string name = required_string(*fn, "name", tf + ".function");
    M3_CHECK(!name.empty(), tf, ".function.name: must not be empty");
    if (auto d = fn->find("description"); d != fn->end()) {
      M3_CHECK(d->is_string() || d->is_null(), tf, ".function.description: expected a string");
    }
    if (auto p = fn->find("parameters"); p != fn->end()) {
      M3_CHECK(p->is_object() || p->is_null(), tf, ".function.parameters: expected an object (JSON Schema), got ",
               type_name(*p));
    }
    out.push_back(ToolInfo{name, *fn});
  }
  return out;
}

void render_tools_block(PromptBuilder& b, const std::vector<ToolInfo>& tools) {
  b.markup(kToolsIntro);
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i) b.markup("\n");
    std::string dumped;
    append_python_json(tools[i].function, dumped);
    b.markup("<tool>");
    b.text(dumped);  // client-written: never matched as control tokens
    b.markup("</tool>");
  }
  b.markup(kToolsOutro);
  write_tool_call_example(b);
}

// One assistant tool call from history, validated; arguments parsed into an object.
struct HistoryCall {
  std::string name;
  Json arguments;
};

HistoryCall parse_history_call(const Json& call, const std::string& cf) {
  M3_CHECK(call.is_object(), cf, ": expected an object, got ", type_name(call));
  if (auto t = call.find("type"); t != call.end()) {
    M3_CHECK(t->is_string() && *t == "function", cf, ".type: expected \"function\"");
  }
  auto fn = call.find("function");
  M3_CHECK(fn != call.end(), cf, ".function: missing");
  M3_CHECK(fn->is_object(), cf, ".function: expected an object, got ", type_name(*fn));
  HistoryCall out;
  out.name = required_string(*fn, "name", cf + ".function");
  M3_CHECK(!out.name.empty(), cf, ".function.name: must not be empty");
  auto args = fn->find("arguments");
  if (args == fn->end() || args->is_null()) {
    out.arguments = Json::object();
  } else if (args->is_string()) {
    const std::string& s = args->get_ref<const std::string&>();
    // A string inside the body escapes the body's depth limit: measure it before parsing it.
    M3_CHECK(!json_depth_exceeded_at(s, kDefaultMaxJsonDepth), cf, ".function.arguments: JSON nested deeper than ",
             kDefaultMaxJsonDepth, " levels");
    // Some clients send "" for a call without parameters.
    out.arguments = s.find_first_not_of(" \t\r\n") == std::string::npos ? Json::object()
                                                                         : Json::parse(s, nullptr, false);
    M3_CHECK(!out.arguments.is_discarded(), cf, ".function.arguments: not valid JSON");
  } else {
    out.arguments = *args;  // tolerated: an already-decoded object
  }
  M3_CHECK(out.arguments.is_object(), cf, ".function.arguments: expected a JSON object, got ",
           type_name(out.arguments));
  return out;
}

std::optional<std::string> reasoning_of(const Json& msg, const std::string& mf) {
  for (std::string_view key : {"reasoning_content", "reasoning"}) {
    auto it = msg.find(key);
    if (it == msg.end() || it->is_null()) continue;
    M3_CHECK(it->is_string(), mf, ".", key, ": expected a string, got ", type_name(*it));
    // An empty string counts as absent: clients echo "" for turns that did not think.
    if (!it->get_ref<const std::string&>().empty()) return it->get<std::string>();
  }
  return std::nullopt;
}

void render_assistant(PromptBuilder& b, const Json& msg, const std::string& mf, bool keep_reasoning) {
  const std::string content = text_only_content(msg.value("content", Json()), mf + ".content");
  std::optional<std::string> reasoning = reasoning_of(msg, mf);  // validated even when dropped
  if (!keep_reasoning) reasoning.reset();
  std::vector<HistoryCall> calls;
  if (auto tc = msg.find("tool_calls"); tc != msg.end() && !tc->is_null()) {
    M3_CHECK(tc->is_array(), mf, ".tool_calls: expected an array, got ", type_name(*tc));
    for (size_t j = 0; j < tc->size(); ++j) calls.push_back(parse_history_call((*tc)[j], field_at(mf + ".tool_calls", j)));
  }
  b.markup(kTurnStart);
  b.markup("ai\n");
  if (reasoning) {
    b.markup(kThinkOpen);
    b.text(*reasoning);
  }
  b.markup(kThinkClose);
  // No separator before the block: the parser keeps content verbatim, so a parsed reply renders
  // back to exactly the text the model generated.
  b.text(content);
  if (!calls.empty()) {
    std::vector<ToolCallXml> xml;
    for (auto& c : calls) xml.push_back(ToolCallXml{std::move(c.name), std::move(c.arguments)});
    write_tool_call_block(b, xml);
  }
  b.markup(kTurnEnd);
  b.markup("\n");
}

void render_plain_turn(PromptBuilder& b, std::string_view role, std::string_view text) {
  b.markup(kTurnStart);
  b.markup(role);
  b.markup("\n");
  b.text(text);
  b.markup(kTurnEnd);
  b.markup("\n");
}

}  // namespace

ThinkingMode parse_thinking_mode(std::string_view value, std::string_view field) {
  if (value == "enabled") return ThinkingMode::Enabled;
  if (value == "disabled") return ThinkingMode::Disabled;
  if (value == "adaptive") return ThinkingMode::Adaptive;
  fail(field, ": unknown thinking mode \"", value, "\" (expected enabled, disabled or adaptive)");
}

std::string_view to_string(ThinkingMode mode) {
  switch (mode) {
    case ThinkingMode::Enabled: return "enabled";
    case ThinkingMode::Disabled: return "disabled";
    case ThinkingMode::Adaptive: return "adaptive";
  }
  return "adaptive";
}

ThinkingMode thinking_mode_from_reasoning_effort(std::string_view effort, std::string_view field) {
  if (effort == "none" || effort == "minimal") return ThinkingMode::Disabled;
  if (effort == "low" || effort == "medium") return ThinkingMode::Adaptive;
  if (effort == "high" || effort == "xhigh") return ThinkingMode::Enabled;
  fail(field, ": unknown reasoning effort \"", effort, "\" (expected none, minimal, low, medium, high or xhigh)");
}

ThinkingMode thinking_mode_for_request(const Json& request, ThinkingMode fallback) {
  if (!request.is_object()) return fallback;
  if (auto kw = request.find("chat_template_kwargs"); kw != request.end() && !kw->is_null()) {
    M3_CHECK(kw->is_object(), "chat_template_kwargs: expected an object, got ", type_name(*kw));
    if (auto m = kw->find("thinking_mode"); m != kw->end() && !m->is_null()) {
      M3_CHECK(m->is_string(), "chat_template_kwargs.thinking_mode: expected a string, got ", type_name(*m));
      return parse_thinking_mode(m->get<std::string>(), "chat_template_kwargs.thinking_mode");
    }
    if (auto e = kw->find("enable_thinking"); e != kw->end() && !e->is_null()) {
      M3_CHECK(e->is_boolean(), "chat_template_kwargs.enable_thinking: expected a boolean, got ", type_name(*e));
      return e->get<bool>() ? ThinkingMode::Enabled : ThinkingMode::Disabled;
    }
  }
  if (auto r = request.find("reasoning_effort"); r != request.end() && !r->is_null()) {
    M3_CHECK(r->is_string(), "reasoning_effort: expected a string, got ", type_name(*r));
    return thinking_mode_from_reasoning_effort(r->get<std::string>(), "reasoning_effort");
  }
  return fallback;
}

std::string RenderedPrompt::text() const {
  std::string s;
  for (const auto& seg : segments) s += seg.text;
  return s;
}

RenderedPrompt render_chat(const Json& messages, const Json& tools_json, const ChatTemplateOptions& options) {
  M3_CHECK(messages.is_array(), "messages: expected an array, got ", type_name(messages));
  M3_CHECK(!messages.empty(), "messages: must not be empty");
  const std::vector<ToolInfo> tools = validate_tools(tools_json);

  // Roles first, so every later error can rely on them.
  std::vector<std::string> roles;
  size_t last_user = std::string::npos;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string mf = field_at("messages", i);
    M3_CHECK(messages[i].is_object(), mf, ": expected an object, got ", type_name(messages[i]));
    std::string role = required_string(messages[i], "role", mf);
    M3_CHECK(role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool",
             mf, ".role: unknown role \"", role, "\" (expected system, developer, user, assistant or tool)");
    if (role == "user") last_user = i;
    roles.push_back(std::move(role));
  }

  RenderedPrompt out;
  PromptBuilder b(out);
  b.markup(kBos);
  b.markup(kTurnStart);
  b.markup("system\n");
  b.markup(kIdentity);
  b.markup("\n\n<thinking_instructions>\n");
  b.markup(kThinkingBase);
  b.markup("\n");
  b.markup(mode_sentence(options.thinking_mode));
  b.markup("\n</thinking_instructions>");
  b.markup(kTurnEnd);
  b.markup("\n");

  // Leading system and developer messages together form the developer turn, joined by a blank
  // line in their order; later ones become developer turns of their own where they stand.
  size_t i = 0;
  std::string instructions;
  bool have_instructions = false;
  for (; i < messages.size() && (roles[i] == "system" || roles[i] == "developer"); ++i) {
    const std::string text = text_only_content(messages[i].value("content", Json()), field_at("messages", i) + ".content");
    if (have_instructions) instructions += "\n\n";
    instructions += text;
    have_instructions = true;
  }
  b.markup(kTurnStart);
  b.markup("developer\n");
  b.text(have_instructions ? std::string_view(instructions) : kDefaultDeveloperText);
  if (!tools.empty()) render_tools_block(b, tools);
  b.markup(kTurnEnd);
  b.markup("\n");

  for (; i < messages.size(); ++i) {
    const Json& msg = messages[i];
    const std::string mf = field_at("messages", i);
    const std::string& role = roles[i];
    if (role == "system" || role == "developer") {
      render_plain_turn(b, "developer", text_only_content(msg.value("content", Json()), mf + ".content"));
    } else if (role == "user") {
      auto c = msg.find("content");
      M3_CHECK(c != msg.end() && !c->is_null(), mf, ".content: missing");
      b.markup(kTurnStart);
      b.markup("user\n");
      render_rich_content(b, out, *c, i, mf + ".content");
      b.markup(kTurnEnd);
      b.markup("\n");
    } else if (role == "assistant") {
      const bool keep = options.history_reasoning == HistoryReasoning::KeepAll || last_user == std::string::npos ||
                        i > last_user;
      render_assistant(b, msg, mf, keep);
    } else {  // tool: this and the following tool messages form one turn
      const bool after_call = i > 0 && roles[i - 1] == "assistant" && messages[i - 1].contains("tool_calls") &&
                              messages[i - 1]["tool_calls"].is_array() && !messages[i - 1]["tool_calls"].empty();
      M3_CHECK(after_call, mf, ": a tool message must follow an assistant message with tool_calls");
      b.markup(kTurnStart);
      b.markup("tool\n");
      for (size_t k = i; k < messages.size() && roles[k] == "tool"; ++k) {
        const std::string kf = field_at("messages", k);
        auto c = messages[k].find("content");
        M3_CHECK(c != messages[k].end() && !c->is_null(), kf, ".content: missing");
        if (k > i) b.markup("\n");
        b.markup("<response>");
        render_rich_content(b, out, *c, k, kf + ".content");
        b.markup("</response>");
        i = k;
      }
      b.markup(kTurnEnd);
      b.markup("\n");
    }
  }

  if (options.add_generation_prompt) {
    b.markup(kTurnStart);
    b.markup("ai\n");
    if (options.thinking_mode == ThinkingMode::Enabled) b.markup(kThinkOpen);
    if (options.thinking_mode == ThinkingMode::Disabled) b.markup(kThinkClose);
    out.opens_reasoning = options.thinking_mode == ThinkingMode::Enabled;
  }
  return out;
}

std::vector<int32_t> tokenize(const Tokenizer& tok, const RenderedPrompt& prompt) {
  // Control tokens are located only inside markup (by the tokenizer itself, allow_special=true);
  // all remaining text, markup and plain alike, is collected into runs that end at a control
  // token and encoded as ordinary text, so the split regex sees what HF would see.
  std::vector<int32_t> ids;
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    const std::vector<int32_t> enc = tok.encode(run, false);
    ids.insert(ids.end(), enc.begin(), enc.end());
    run.clear();
  };
  for (const PromptSegment& seg : prompt.segments) {
    if (!seg.special) {
      run += seg.text;
      continue;
    }
    for (int32_t id : tok.encode(seg.text, true)) {
      if (tok.is_special(id)) {
        flush();
        ids.push_back(id);
      } else {
        run += tok.token_bytes(id);
      }
    }
  }
  flush();
  return ids;
}

}  // namespace m3::chat
