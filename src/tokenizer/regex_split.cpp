#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_field.h"

namespace m3::tok {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? str_cat("PCRE2 error ", code) : std::string(reinterpret_cast<const char*>(buf));
}

}  // namespace

struct SplitRegex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

// Match data sized for the pattern; one per split() call keeps the compiled code shareable
// between threads (PCRE2 code is read-only at match time, match data is not).
struct SplitRegex::MatchData {
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (md == nullptr) throw std::bad_alloc();
  }
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* md;
};

SplitRegex::SplitRegex(std::string_view pattern, bool literal, const std::string& field)
    : compiled_(std::make_unique<Compiled>()), field_(field) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2 refuses UCP together with LITERAL; a literal has no character classes anyway.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                  &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    fail(field, ": cannot compile the pattern: ", pcre2_message(error_code), " at offset ", error_offset);
  }
  // JIT is only a speed-up: when the platform lacks it the interpreter gives the same matches.
  (void)pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

SplitRegex::~SplitRegex() = default;

void SplitRegex::split(std::string_view text, std::vector<std::string_view>& out) const {
  // Cut the text at invalid UTF-8 so PCRE2 only ever sees valid UTF-8 (and can skip its own
  // check); an incomplete sequence at the very end is invalid too, byte by byte.
  MatchData data(compiled_->code);
  size_t run_begin = 0, pos = 0;
  while (pos < text.size()) {
    Utf8Scan s = scan_utf8(text, pos);
    if (s.kind == Utf8Kind::kComplete) {
      pos += s.length;
      continue;
    }
    split_valid(text.substr(run_begin, pos - run_begin), data, out);
    for (size_t i = 0; i < s.length; ++i) out.push_back(text.substr(pos + i, 1));
    pos += s.length;
    run_begin = pos;
  }
  split_valid(text.substr(run_begin), data, out);
}

void SplitRegex::split_valid(std::string_view text, MatchData& data, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;       // where the next search begins
  size_t piece_end = 0;   // end of the last piece emitted
  while (start < text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Very long pieces can outgrow the JIT's small default stack; the interpreter keeps its
      // backtracking state on the heap and gives the same answer.
      rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data.md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail(field_, ": matching the pattern failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t m_begin = ov[0], m_end = ov[1];
    if (m_end == m_begin) {
      // An empty match makes no piece (as in HF tokenizers); step over one character.
      if (m_begin >= text.size()) break;
      start = m_begin + scan_utf8(text, m_begin).length;
      continue;
    }
    if (m_begin > piece_end) out.push_back(text.substr(piece_end, m_begin - piece_end));
    out.push_back(text.substr(m_begin, m_end - m_begin));
    piece_end = start = m_end;
  }
  if (piece_end < text.size()) out.push_back(text.substr(piece_end));
}

// ---- pre_tokenizer from tokenizer.json ----

namespace {

bool bool_field(const nlohmann::json& obj, const char* key, bool fallback, const std::string& path) {
  const nlohmann::json* v = find_field(obj, key);
  if (v == nullptr) return fallback;
  M3_CHECK(v->is_boolean(), path, ".", key, ": expected true or false");
  return v->get<bool>();
}

PreTokenizerStep parse_split(const nlohmann::json& node, const std::string& path) {
  const nlohmann::json* pattern = find_field(node, "pattern");
  M3_CHECK(pattern != nullptr && pattern->is_object(), path, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
  bool literal = false;
  std::string text;
  std::string pattern_path;
  if (auto it = pattern->find("Regex"); it != pattern->end() && it->is_string()) {
    text = it->get<std::string>();
    pattern_path = path + ".pattern.Regex";
  } else if (auto it2 = pattern->find("String"); it2 != pattern->end() && it2->is_string()) {
    text = it2->get<std::string>();
    literal = true;
    pattern_path = path + ".pattern.String";
  } else {
    fail(path, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
  }
  const nlohmann::json* behavior = find_field(node, "behavior");
  M3_CHECK(behavior != nullptr && behavior->is_string(), path, ".behavior: missing (expected \"Isolated\")");
  M3_CHECK(behavior->get<std::string>() == "Isolated", path, ".behavior: \"", behavior->get<std::string>(),
           "\" is not supported (only \"Isolated\")");
  M3_CHECK(!bool_field(node, "invert", false, path), path, ".invert: true is not supported");
  PreTokenizerStep step;
  step.regex = std::make_shared<const SplitRegex>(text, literal, pattern_path);
  return step;
}

PreTokenizerStep parse_byte_level(const nlohmann::json& node, const std::string& path) {
  PreTokenizerStep step;
  // Defaults are those of HF tokenizers' ByteLevel (add_prefix_space and use_regex on).
  step.add_prefix_space = bool_field(node, "add_prefix_space", true, path);
  if (bool_field(node, "use_regex", true, path)) {
    step.regex = std::make_shared<const SplitRegex>(kGpt2SplitPattern, false, path + " (GPT-2 regex)");
  }
  return step;
}

void parse_into(const nlohmann::json& node, const std::string& path, std::vector<PreTokenizerStep>& steps) {
  M3_CHECK(node.is_object(), path, ": expected an object");
  const nlohmann::json* type = find_field(node, "type");
  M3_CHECK(type != nullptr && type->is_string(), path, ".type: missing");
  const std::string kind = type->get<std::string>();
  if (kind == "Sequence") {
    const nlohmann::json* list = find_field(node, "pretokenizers");
    M3_CHECK(list != nullptr && list->is_array(), path, ".pretokenizers: expected an array");
    for (size_t i = 0; i < list->size(); ++i) parse_into((*list)[i], str_cat(path, ".pretokenizers[", i, "]"), steps);
  } else if (kind == "Split") {
    steps.push_back(parse_split(node, path));
  } else if (kind == "ByteLevel") {
    steps.push_back(parse_byte_level(node, path));
  } else {
    fail(path, ".type: \"", kind, "\" is not supported (supported: Sequence, Split, ByteLevel)");
  }
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& node, const std::string& source) {
  std::vector<PreTokenizerStep> steps;
  if (!node.is_null()) parse_into(node, source + ": pre_tokenizer", steps);
  return from_steps(std::move(steps));
}

PreTokenizer PreTokenizer::from_steps(std::vector<PreTokenizerStep> steps) {
  PreTokenizer p;
  p.steps_ = std::move(steps);
  return p;
}

void PreTokenizer::run(std::string_view text, Pieces& pieces) const {
  pieces.views.clear();
  pieces.owned.clear();  // strings built for the previous text are no longer referenced
  pieces.views.push_back(text);
  std::vector<std::string_view> next;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces.views) {
      // HF prepends the space to every piece the step receives that does not already start
      // with one (so after a Split it applies per piece, not once per text).
      if (step.add_prefix_space && !piece.empty() && piece.front() != ' ') {
        pieces.owned.push_back(str_cat(" ", piece));
        piece = pieces.owned.back();
      }
      if (step.regex) {
        step.regex->split(piece, next);
      } else if (!piece.empty()) {
        next.push_back(piece);
      }
    }
    pieces.views.swap(next);
  }
}

}  // namespace m3::tok
