#include "m3/chat/tool_call_parser.h"

#include <algorithm>
#include <memory>
#include <random>

#include "m3/chat/text_scan.h"

namespace m3::chat {
namespace {

// Bounds that keep a malformed stream from being held back (or nested) without limit. A
// candidate tag longer than this is ordinary text.
constexpr size_t kMaxTagBytes = 1024;
constexpr size_t kMaxSpacesAfterNs = 16;
constexpr size_t kMaxDepth = 32;  // nested elements inside one parameter
constexpr std::string_view kTriggerTag = "<tool_call>";

enum class Lex { Tag, Partial, None };

bool is_name_char(char c) {
  return !is_space(c) && c != '<' && c != '>' && c != '/' && c != '=' && c != '"' && c != '\'';
}

// NS followed by optional whitespace; Partial when `s` ends before that is decided.
Lex match_namespace(std::string_view s, size_t& i) {
  for (char c : kNamespace) {
    if (i >= s.size()) return Lex::Partial;
    if (s[i] != c) return Lex::None;
    ++i;
  }
  size_t spaces = 0;
  while (i < s.size() && is_space(s[i])) {
    if (++spaces > kMaxSpacesAfterNs) return Lex::None;
    ++i;
  }
  return i >= s.size() ? Lex::Partial : Lex::Tag;
}

// The block opener NS<tool_call> at `pos`; on success `end` is just past it.
Lex match_trigger(std::string_view s, size_t pos, size_t& end) {
  size_t i = pos;
  if (Lex r = match_namespace(s, i); r != Lex::Tag) return r;
  for (char c : kTriggerTag) {
    if (i >= s.size()) return Lex::Partial;
    if (s[i] != c) return Lex::None;
    ++i;
  }
  end = i;
  return Lex::Tag;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The JSON escape of a piece of string value, without the quotes.
std::string escape_string_piece(std::string_view s) {
  std::string q = dump(Json(std::string(s)));
  return q.substr(1, q.size() - 2);
}

}  // namespace

struct ToolCallParser::Tag {
  bool closing = false;
  bool self_closing = false;
  std::string name;
  std::string name_attr;  // value of name="..." (invoke)
  size_t end = 0;
};

namespace {

// NS ws* <name attr="v"...> | NS ws* </name> | NS ws* <name/> at `pos`.
template <typename TagT>
Lex lex_tag(std::string_view s, size_t pos, TagT& tag) {
  size_t i = pos;
  if (Lex r = match_namespace(s, i); r != Lex::Tag) return r;
  auto over = [&] { return i - pos > kMaxTagBytes; };
  auto skip_spaces = [&] {
    while (i < s.size() && is_space(s[i]) && !over()) ++i;
  };
  auto read_name = [&](std::string& out) -> Lex {
    const size_t start = i;
    while (i < s.size() && is_name_char(s[i])) {
      if (over()) return Lex::None;
      ++i;
    }
    if (i >= s.size()) return Lex::Partial;
    if (i == start) return Lex::None;
    out.assign(s.substr(start, i - start));
    return Lex::Tag;
  };
  if (s[i] != '<') return Lex::None;
  if (++i >= s.size()) return Lex::Partial;
  if (s[i] == '/') {
    tag.closing = true;
    ++i;
  }
  if (Lex r = read_name(tag.name); r != Lex::Tag) return r;
  for (;;) {
    skip_spaces();
    if (over()) return Lex::None;
    if (i >= s.size()) return Lex::Partial;
    if (s[i] == '>') {
      tag.end = i + 1;
      return Lex::Tag;
    }
    if (tag.closing) return Lex::None;
    if (s[i] == '/') {
      if (i + 1 >= s.size()) return Lex::Partial;
      if (s[i + 1] != '>') return Lex::None;
      tag.self_closing = true;
      tag.end = i + 2;
      return Lex::Tag;
    }
    std::string attr;
    if (Lex r = read_name(attr); r != Lex::Tag) return r;
    skip_spaces();
    if (i >= s.size()) return over() ? Lex::None : Lex::Partial;
    if (s[i] != '=') return Lex::None;
    ++i;
    skip_spaces();
    if (i >= s.size()) return over() ? Lex::None : Lex::Partial;
    std::string value;
    if (s[i] == '"' || s[i] == '\'') {
      const size_t close = s.find(s[i], i + 1);
      if (close == std::string_view::npos) return s.size() - pos > kMaxTagBytes ? Lex::None : Lex::Partial;
      value.assign(s.substr(i + 1, close - i - 1));
      i = close + 1;
      if (over()) return Lex::None;
    } else if (Lex r = read_name(value); r != Lex::Tag) {
      return r;
    }
    if (attr == "name") tag.name_attr = std::move(value);
  }
}

}  // namespace

ToolCallIdGenerator random_call_ids() {
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [rng] {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlphabet[pick(*rng)];
    return id;
  };
}

ToolCallIdGenerator counting_call_ids(std::string prefix) {
  auto next = std::make_shared<int>(0);
  return [next, prefix = std::move(prefix)] { return prefix + std::to_string((*next)++); };
}

ToolCallParser::ToolCallParser(const Json& tools, ToolCallIdGenerator ids)
    : schemas_(tools), ids_(ids ? std::move(ids) : random_call_ids()) {}

void ToolCallParser::push(std::string_view text, DeltaList& out) {
  buf_.append(text);
  process(false, out);
}

void ToolCallParser::finish(DeltaList& out) {
  process(true, out);  // at the end nothing can grow into a marker any more
  if (!in_block_) return;
  truncated_ = true;
  if (in_invoke_) {
    if (in_param_ && param_streams_string_) emit_arguments("\"", out);  // keep the text received
    in_param_ = false;  // an unfinished non-string parameter is dropped: its value is unknown
    stack_.clear();
    incomplete_call_ = call_index_;
    emit_arguments(args_open_ ? "}" : "{}", out);
    in_invoke_ = false;
  }
  if (!block_has_invoke_) out.content(block_raw_);  // nothing was reported: give the text back
  block_raw_.clear();
  in_block_ = false;
}

void ToolCallParser::process(bool at_end, DeltaList& out) {
  size_t pos = 0;
  bool more = true;
  while (more && pos < buf_.size()) {
    if (!in_block_) {
      more = process_text(pos, at_end, out);
    } else if (in_param_ && param_streams_string_) {
      more = process_string_param(pos, at_end, out);
    } else {
      more = process_block(pos, at_end, out);
    }
  }
  buf_.erase(0, pos);
}

bool ToolCallParser::process_text(size_t& pos, bool at_end, DeltaList& out) {
  const std::string_view s = buf_;
  for (size_t p = s.find(kNamespace[0], pos); p != std::string_view::npos; p = s.find(kNamespace[0], p + 1)) {
    size_t end = 0;
    const Lex r = match_trigger(s, p, end);
    if (r == Lex::Tag) {
      out.content(s.substr(pos, p - pos));
      in_block_ = true;
      block_has_invoke_ = false;
      block_raw_.assign(s.substr(p, end - p));
      pos = end;
      return true;
    }
    if (r == Lex::Partial && !at_end) {
      out.content(s.substr(pos, p - pos));
      pos = p;
      return false;
    }
  }
  out.content(s.substr(pos));
  pos = s.size();
  return false;
}

bool ToolCallParser::process_string_param(size_t& pos, bool at_end, DeltaList& out) {
  // Only the parameter's own closing tag (or a closing invoke/tool_call, if the model forgot it)
  // ends a string; any other markup inside is part of the text.
  const std::string_view s = buf_;
  for (size_t p = s.find(kNamespace[0], pos); p != std::string_view::npos; p = s.find(kNamespace[0], p + 1)) {
    Tag tag;
    const Lex r = lex_tag(s, p, tag);
    if (r == Lex::Partial && !at_end) {
      emit_arguments(escape_string_piece(s.substr(pos, p - pos)), out);
      pos = p;
      return false;
    }
    if (r != Lex::Tag || !tag.closing) continue;
    if (tag.name == param_key_ || tag.name == "invoke" || tag.name == "tool_call") {
      emit_arguments(escape_string_piece(s.substr(pos, p - pos)), out);
      finish_param(out);
      pos = tag.name == param_key_ ? tag.end : p;  // invoke/tool_call closers are handled by the block
      return true;
    }
  }
  emit_arguments(escape_string_piece(s.substr(pos)), out);
  pos = s.size();
  return false;
}

bool ToolCallParser::process_block(size_t& pos, bool at_end, DeltaList& out) {
  const std::string_view s = buf_;
  for (size_t p = s.find(kNamespace[0], pos); p != std::string_view::npos; p = s.find(kNamespace[0], p + 1)) {
    Tag tag;
    const Lex r = lex_tag(s, p, tag);
    if (r == Lex::Tag) {
      on_text(s.substr(pos, p - pos));
      on_tag(tag, s.substr(p, tag.end - p), out);
      pos = tag.end;
      return true;
    }
    if (r == Lex::Partial && !at_end) {
      on_text(s.substr(pos, p - pos));
      pos = p;
      return false;
    }
  }
  on_text(s.substr(pos));
  pos = s.size();
  return false;
}

void ToolCallParser::on_text(std::string_view s) {
  if (!block_has_invoke_) block_raw_ += s;
  // Text outside a parameter (normally whitespace between elements) carries nothing.
  if (in_param_ && !stack_.empty()) stack_.back()->text += s;
}

void ToolCallParser::on_tag(const Tag& tag, std::string_view raw, DeltaList& out) {
  if (!block_has_invoke_) block_raw_ += raw;
  if (in_param_) {
    if (!tag.closing) {
      if (stack_.size() >= kMaxDepth) {
        stack_.back()->text += raw;  // too deep to be a real value: keep it as text
        return;
      }
      stack_.back()->children.push_back(XmlNode{tag.name, {}, {}});
      if (!tag.self_closing) stack_.push_back(&stack_.back()->children.back());
      return;
    }
    // A closer ends the nearest open element of its name (and any left open inside it).
    for (size_t level = stack_.size(); level-- > 0;) {
      if (stack_[level]->name != tag.name) continue;
      stack_.resize(level);
      if (level == 0) finish_param(out);
      return;
    }
    if (tag.name != "invoke" && tag.name != "tool_call") return;  // a stray closer
    finish_param(out);  // the model forgot to close the parameter
  }
  if (in_invoke_) {
    if (tag.closing) {
      if (tag.name == "invoke" || tag.name == "tool_call") close_invoke(out);
      if (tag.name == "tool_call") close_block(out);
      return;
    }
    if (tag.name != "invoke") {
      start_param(tag.name, tag.self_closing, out);
      return;
    }
    close_invoke(out);  // a new invoke before the previous one closed
  }
  if (!tag.closing && tag.name == "invoke" && !tag.name_attr.empty()) {
    start_invoke(tag.name_attr, out);
  } else if (tag.closing && tag.name == "tool_call") {
    close_block(out);
  }
}

void ToolCallParser::start_invoke(const std::string& name, DeltaList& out) {
  call_index_ = calls_++;
  in_invoke_ = true;
  args_open_ = false;
  seen_keys_.clear();
  params_schema_ = schemas_.parameters(name);
  block_has_invoke_ = true;
  block_raw_.clear();
  out.tool_call(ToolCallDelta{call_index_, ids_(), name, ""});
}

void ToolCallParser::close_invoke(DeltaList& out) {
  if (in_param_) finish_param(out);
  emit_arguments(args_open_ ? "}" : "{}", out);
  in_invoke_ = false;
}

void ToolCallParser::start_param(const std::string& key, bool self_closing, DeltaList& out) {
  in_param_ = true;
  param_key_ = key;
  param_skipped_ = std::find(seen_keys_.begin(), seen_keys_.end(), key) != seen_keys_.end();
  param_streams_string_ = !param_skipped_ && is_string_only(ToolSchemas::property(params_schema_, key));
  if (param_streams_string_) {
    seen_keys_.push_back(key);
    emit_arguments((args_open_ ? "," : "{") + dump(Json(key)) + ":\"", out);
    args_open_ = true;
  } else {
    param_root_ = XmlNode{key, {}, {}};
    stack_.assign(1, &param_root_);
  }
  if (self_closing) {
    stack_.clear();
    finish_param(out);
  }
}

void ToolCallParser::finish_param(DeltaList& out) {
  if (param_streams_string_) {
    emit_arguments("\"", out);
  } else if (!param_skipped_) {
    const Json value = typed_value(param_root_, ToolSchemas::property(params_schema_, param_key_));
    emit_arguments((args_open_ ? "," : "{") + dump(Json(param_key_)) + ":" + dump(value), out);
    args_open_ = true;
    seen_keys_.push_back(param_key_);
  }
  in_param_ = false;
  param_streams_string_ = false;
  param_skipped_ = false;
  stack_.clear();
  param_root_ = XmlNode{};
}

void ToolCallParser::close_block(DeltaList& out) {
  if (!block_has_invoke_) out.content(block_raw_);  // a block without calls was just text
  block_raw_.clear();
  in_block_ = false;
  block_has_invoke_ = false;
}

void ToolCallParser::emit_arguments(std::string fragment, DeltaList& out) {
  out.tool_call(ToolCallDelta{call_index_, "", "", std::move(fragment)});
}

}  // namespace m3::chat
