#include "server/request.h"

#include <cctype>
#include <cmath>

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "m3/chat/json_depth.h"
#include "m3/chat/thinking_budget.h"

namespace m3::server {

namespace {

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

// The first `max` bytes of s (fewer if a UTF-8 character would be split), "..." when cut.
std::string shortened(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // a continuation byte
  return s.substr(0, n) + "...";
}

// A value for an error message: numbers as written, anything else by its type and size. Never the
// whole value (a client's 8 MB array does not go back in a 400).
std::string excerpt(const Json& v) {
  if (v.is_number() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.size() <= 40) return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
    return str_cat("a string of ", s.size(), " bytes");
  }
  if (v.is_array()) return str_cat("an array of ", v.size(), " elements");
  if (v.is_object()) return str_cat("an object of ", v.size(), " members");
  return type_name(v);
}

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, param + ": " + what, param);
}

// Present and not null.
const Json* field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number_in(const Json& body, const char* name, double lo, double hi, double fallback) {
  const Json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, std::string("expected a number, got ") + type_name(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(name, str_cat("must be between ", lo, " and ", hi, ", got ", x));
  return x;
}

bool boolean(const Json& body, const char* name, bool fallback, const std::string& prefix = {}) {
  const Json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(prefix + name, std::string("expected a boolean, got ") + type_name(*v));
  return v->get<bool>();
}

std::optional<int64_t> positive_int(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad(name, std::string("expected an integer, got ") + type_name(*v));
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u < 1) bad(name, "must be at least 1, got 0");
    if (u > uint64_t(INT64_MAX)) bad(name, "too large");
    return int64_t(u);
  }
  const int64_t x = v->get<int64_t>();
  if (x < 1) bad(name, str_cat("must be at least 1, got ", x));
  return x;
}

// OpenAI's map {"token id": bias}. The ids are checked against the vocabulary later
// (check_token_ids): the tokenizer is not known here.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& body) {
  std::vector<std::pair<int32_t, float>> out;
  const Json* m = field(body, "logit_bias");
  if (!m) return out;
  if (!m->is_object()) bad("logit_bias", std::string("expected an object mapping token ids to biases, got ") + type_name(*m));
  for (const auto& [key, value] : m->items()) {
    const std::string shown = key.size() <= 20 ? "\"" + key + "\"" : str_cat("a key of ", key.size(), " bytes");
    int64_t id = 0;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) {
      digits = digits && c >= '0' && c <= '9';
      if (digits) id = id * 10 + (c - '0');
    }
    if (!digits || id > INT32_MAX) bad("logit_bias", "keys must be token ids (decimal integers), got " + shown);
    if (!value.is_number())
      bad(str_cat("logit_bias.", id), std::string("expected a number from -100 to 100, got ") + type_name(value));
    const double b = value.get<double>();
    if (!std::isfinite(b) || b < -100.0 || b > 100.0)
      bad(str_cat("logit_bias.", id), str_cat("must be between -100 and 100, got ", b));
    out.emplace_back(int32_t(id), float(b));
  }
  return out;
}

GenerationParams parse_generation(const Json& body, uint64_t seed_if_unset, const SamplingParams& d) {
  GenerationParams g;
  if (const Json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", std::string("expected a string, got ") + type_name(*m));
    g.model = m->get<std::string>();
  }
  g.sampling.temperature = float(number_in(body, "temperature", 0.0, 2.0, d.temperature));
  g.sampling.top_p = float(number_in(body, "top_p", 0.0, 1.0, d.top_p));
  g.sampling.top_k = d.top_k;
  if (g.sampling.top_p <= 0.0f) bad("top_p", "must be greater than 0");
  // Extensions some clients send (llama.cpp / vLLM names).
  if (const Json* v = field(body, "top_k")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > (1 << 30))
      bad("top_k", "expected a non-negative integer");
    g.sampling.top_k = int(v->get<int64_t>());
  }
  g.sampling.min_p = float(number_in(body, "min_p", 0.0, 1.0, d.min_p));
  g.sampling.repetition_penalty = float(number_in(body, "repetition_penalty", 1e-3, 100.0, d.repetition_penalty));
  g.sampling.presence_penalty = float(number_in(body, "presence_penalty", -2.0, 2.0, 0.0));
  g.sampling.frequency_penalty = float(number_in(body, "frequency_penalty", -2.0, 2.0, 0.0));
  if (const Json* v = field(body, "seed")) {
    if (!v->is_number_integer()) bad("seed", std::string("expected an integer, got ") + type_name(*v));
    g.sampling.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  } else {
    g.sampling.seed = seed_if_unset;
  }
  // max_completion_tokens is the newer name; when both are given it wins.
  g.max_tokens = positive_int(body, "max_tokens");
  if (auto m = positive_int(body, "max_completion_tokens")) g.max_tokens = m;

  if (const Json* s = field(body, "stop")) {
    if (s->is_string()) {
      g.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > 16) bad("stop", "at most 16 stop strings");
      for (size_t i = 0; i < s->size(); ++i) {
        if (!(*s)[i].is_string()) bad(str_cat("stop[", i, "]"), std::string("expected a string, got ") + type_name((*s)[i]));
        g.stop.push_back((*s)[i].get<std::string>());
      }
    } else {
      bad("stop", std::string("expected a string or an array of strings, got ") + type_name(*s));
    }
    for (size_t i = 0; i < g.stop.size(); ++i)
      if (g.stop[i].empty()) bad("stop", "stop strings must not be empty");
  }
  if (const Json* n = field(body, "n")) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1 || n->get<int64_t>() > kMaxChoices)
      bad("n", "expected an integer from 1 to " + std::to_string(kMaxChoices) + ", got " + excerpt(*n));
    g.n = int(n->get<int64_t>());
  }
  g.stream = boolean(body, "stream", false);
  g.ignore_eos = boolean(body, "ignore_eos", false);
  if (const Json* rf = field(body, "response_format")) {
    const Json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (!type || !type->is_string()) bad("response_format", "expected an object with a string \"type\"");
    const std::string t = type->get<std::string>();
    if (t == "json_object") g.json_object = true;
    else if (t == "json_schema") bad("response_format", "json_schema is not supported (json_object and text are)");
    else if (t != "text") bad("response_format", "type must be \"text\" or \"json_object\", got \"" + t + "\"");
  }
  g.sampling.logit_bias = parse_logit_bias(body);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", std::string("expected an object, got ") + type_name(*so));
    g.include_usage = boolean(*so, "include_usage", false, "stream_options.");
  }
  try {
    g.sampling.validate();
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  return g;
}

// Every field a request may carry: each one is implemented (or refused with its own message
// below). Anything else is a 400, never silently ignored: a client that asks for something this
// server does not do must find out. `user` is OpenAI's end-user id for abuse tracking; it has no
// effect on the output by definition, so accepting it ignores nothing.
const char* const kGenerationFields[] = {
    "model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "seed", "max_tokens", "max_completion_tokens", "stop", "n", "stream",
    "stream_options", "ignore_eos", "response_format", "logit_bias", "logprobs", "user"};
const char* const kChatFields[] = {"messages", "tools", "tool_choice", "parallel_tool_calls", "top_logprobs",
                                   "reasoning_effort", "chat_template_kwargs"};
const char* const kCompletionFields[] = {"prompt", "echo", "suffix", "best_of"};

template <size_t N>
bool listed(const char* const (&names)[N], std::string_view key) {
  for (const char* n : names)
    if (key == n) return true;
  return false;
}

template <size_t N>
void refuse_unknown_fields(const Json& body, const char* const (&endpoint_fields)[N]) {
  for (const auto& [key, value] : body.items()) {
    if (listed(kGenerationFields, key) || listed(endpoint_fields, key)) continue;
    const std::string shown = shortened(key, 40);
    throw ApiError(400, "unknown field \"" + shown + "\": not supported by this server (docs/SERVER.md lists the fields)",
                   shown, "unsupported_parameter");
  }
}

const char* const kRoles[] = {"system", "developer", "user", "assistant", "tool"};

}  // namespace

std::string param_of_error_message(std::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == std::string_view::npos) return {};
  const std::string_view head = message.substr(0, colon);
  if (head.find(' ') != std::string_view::npos) return {};
  return std::string(head);
}

Json parse_json_body(std::string_view body, int max_depth) {
  // Measured on the text first: no Json value deeper than the limit is ever built, copied or dumped.
  if (const auto at = chat::json_depth_exceeded_at(body, max_depth))
    throw ApiError(400,
                   str_cat("request body: JSON nested deeper than the limit of ", max_depth, " levels (at byte ", *at,
                           "; the server's --max-json-depth)"),
                   {}, "json_too_deep");
  Json j;
  try {
    j = Json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::exception& e) {
    // nlohmann quotes the offending token whole (a 100,000-digit number): keep the message short.
    throw ApiError(400, "request body is not valid JSON: " + shortened(e.what(), 200), {}, "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, std::string("request body: expected a JSON object, got ") + type_name(j));
  return j;
}

ChatRequest parse_chat_request(const Json& body, uint64_t seed_if_unset, const SamplingParams& defaults) {
  ChatRequest r;
  refuse_unknown_fields(body, kChatFields);
  // Calls are parsed as the model writes them, several per turn; one-at-a-time is not enforced.
  if (const Json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) bad("parallel_tool_calls", std::string("expected a boolean, got ") + type_name(*p));
    if (!p->get<bool>()) bad("parallel_tool_calls", "false is not supported (the model may make several calls per turn)");
  }
  auto m = body.find("messages");
  if (m == body.end()) bad("messages", "missing (an array of chat messages is required)");
  if (!m->is_array()) bad("messages", std::string("expected an array, got ") + type_name(*m));
  if (m->empty()) bad("messages", "must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& msg = (*m)[i];
    const std::string mf = str_cat("messages[", i, "]");
    if (!msg.is_object()) bad(mf, std::string("expected an object, got ") + type_name(msg));
    auto role = msg.find("role");
    if (role == msg.end()) bad(mf + ".role", "missing");
    if (!role->is_string()) bad(mf + ".role", std::string("expected a string, got ") + type_name(*role));
    const std::string rs = role->get<std::string>();
    bool known = false;
    for (const char* k : kRoles) known = known || rs == k;
    if (!known) bad(mf + ".role", "unknown role \"" + rs + "\" (expected system, developer, user, assistant or tool)");
  }
  r.messages = *m;

  if (const Json* t = field(body, "tools")) {
    if (!t->is_array()) bad("tools", std::string("expected an array, got ") + type_name(*t));
    for (size_t i = 0; i < t->size(); ++i) {
      const Json& tool = (*t)[i];
      const std::string tf = str_cat("tools[", i, "]");
      if (!tool.is_object()) bad(tf, std::string("expected an object, got ") + type_name(tool));
      auto type = tool.find("type");
      if (type != tool.end() && (!type->is_string() || type->get<std::string>() != "function"))
        bad(tf + ".type", "only \"function\" tools are supported");
      auto fn = tool.find("function");
      if (fn == tool.end() || !fn->is_object()) bad(tf + ".function", "expected an object");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get<std::string>().empty())
        bad(tf + ".function.name", "expected a non-empty string");
    }
    if (!t->empty()) r.tools = *t;
  }

  if (const Json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "auto") r.tool_choice.kind = ToolChoiceKind::Auto;
      else if (s == "none") r.tool_choice.kind = ToolChoiceKind::None;
      else if (s == "required") r.tool_choice.kind = ToolChoiceKind::Required;
      else bad("tool_choice", "expected \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}, got \"" + s + "\"");
    } else if (tc->is_object()) {
      auto fn = tc->find("function");
      if (fn == tc->end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
        bad("tool_choice.function.name", "expected a string");
      r.tool_choice.kind = ToolChoiceKind::Named;
      r.tool_choice.name = (*fn)["name"].get<std::string>();

    } else {
      bad("tool_choice", std::string("expected a string or an object, got ") + type_name(*tc));
    }
    if (r.tool_choice.kind == ToolChoiceKind::Required || r.tool_choice.kind == ToolChoiceKind::Named) {
      if (r.tools.is_null()) bad("tool_choice", "requires a non-empty \"tools\" array");
    }
    // "required" with a single tool can only mean that tool: force its invoke too.
    if (r.tool_choice.kind == ToolChoiceKind::Required && r.tools.size() == 1) {
      r.tool_choice.kind = ToolChoiceKind::Named;
      r.tool_choice.name = r.tools[0]["function"]["name"].get<std::string>();
    }
    if (r.tool_choice.kind == ToolChoiceKind::Named) {
      bool found = false;
      for (const Json& t : r.tools) found = found || t["function"]["name"].get<std::string>() == r.tool_choice.name;
      if (!found) bad("tool_choice.function.name", "no tool named \"" + r.tool_choice.name + "\" in tools");
      // The name goes into the forced prompt text as markup: OpenAI's name rule keeps it plain.
      const std::string& nm = r.tool_choice.name;
      bool ok = !nm.empty() && nm.size() <= 64;
      for (char c : nm) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
      if (!ok) bad("tool_choice.function.name", "expected 1-64 characters of a-z, A-Z, 0-9, _, - or . (the forced tool name)");
    }
  }

  if (const Json* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("chat_template_kwargs", std::string("expected an object, got ") + type_name(*k));
    // The M3 template reads these two; any other keyword would be silently dropped.
    for (const auto& [key, value] : k->items())
      if (key != "thinking_mode" && key != "enable_thinking")
        bad("chat_template_kwargs." + shortened(key, 40),
            "not used by the M3 chat template (it reads thinking_mode and enable_thinking)");
  }
  try {
    if (const Json* e = field(body, "reasoning_effort")) {
      // A name, or an explicit reasoning-token budget (a number or a string of digits).
      std::string effort;
      if (e->is_string()) effort = e->get<std::string>();
      else if (e->is_number_integer() && e->get<int64_t>() >= 0) effort = std::to_string(e->get<int64_t>());
      else bad("reasoning_effort", std::string("expected a string or a non-negative integer, got ") + type_name(*e));
      const chat::ThinkingEffort effort_plan = chat::parse_reasoning_effort(effort, "reasoning_effort");
      r.max_reasoning_tokens = effort_plan.max_reasoning_tokens;
      // chat_template_kwargs still win for the mode; reasoning_effort decides it otherwise.
      Json rest = body;
      rest.erase("reasoning_effort");
      r.thinking_mode = chat::thinking_mode_for_request(rest, effort_plan.mode);
    } else {
      r.thinking_mode = chat::thinking_mode_for_request(body);
    }
  } catch (const Error& e) {
    throw ApiError(400, e.what(), param_of_error_message(e.what()));
  }
  r.gen = parse_generation(body, seed_if_unset, defaults);
  r.gen.logprobs = boolean(body, "logprobs", false);
  if (const Json* t = field(body, "top_logprobs")) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0 || t->get<int64_t>() > 20)
      bad("top_logprobs", "expected an integer from 0 to 20");
    if (!r.gen.logprobs) bad("top_logprobs", "needs \"logprobs\": true");
    r.gen.top_logprobs = int(t->get<int64_t>());
  }
  return r;
}

CompletionRequest parse_completion_request(const Json& body, uint64_t seed_if_unset, const SamplingParams& defaults) {
  CompletionRequest r;
  refuse_unknown_fields(body, kCompletionFields);
  auto p = body.find("prompt");
  if (p == body.end() || p->is_null()) bad("prompt", "missing (a string is required)");
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
  } else {
    bad("prompt", std::string("expected a string (or an array holding one string), got ") + type_name(*p));
  }
  if (r.prompt.empty()) bad("prompt", "must not be empty");
  if (boolean(body, "echo", false)) bad("echo", "not supported by this server");
  if (field(body, "suffix")) bad("suffix", "not supported by this server");
  if (const Json* b = field(body, "best_of"))
    if (!b->is_number_integer() || b->get<int64_t>() != 1) bad("best_of", "only best_of=1 is supported");
  r.gen = parse_generation(body, seed_if_unset, defaults);
  if (const Json* l = field(body, "logprobs"))
    if (!(l->is_boolean() && !l->get<bool>())) bad("logprobs", "not supported by /v1/completions (use /v1/chat/completions)");
  return r;
}

void check_token_ids(const GenerationParams& gen, int vocab_size) {
  for (const auto& [id, bias] : gen.sampling.logit_bias)
    if (id >= vocab_size)
      bad("logit_bias", str_cat("token id ", id, " is outside the vocabulary (ids 0 to ", vocab_size - 1, ")"));
}

std::string forced_tool_prefix(const ToolChoice& choice, chat::ThinkingMode mode) {
  if (choice.kind != ToolChoiceKind::Required && choice.kind != ToolChoiceKind::Named) return {};
  std::string s;
  // The disabled-mode generation prefix already closed reasoning; otherwise close it (an empty
  // reasoning block): a forced call skips thinking.
  if (mode != chat::ThinkingMode::Disabled) s += chat::kThinkClose;
  s += chat::kNamespace;
  s += "<tool_call>\n";
  if (choice.kind == ToolChoiceKind::Named) {
    s += chat::kNamespace;
    s += "<invoke name=\"" + choice.name + "\">";
  }
  return s;
}

}  // namespace m3::server
