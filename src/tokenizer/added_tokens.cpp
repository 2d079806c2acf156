#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "tokenizer/byte_level.h"

namespace m3::tok {
namespace {

bool bool_field(const nlohmann::json& obj, const char* key, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return false;
  M3_CHECK(it->is_boolean(), path, ".", key, ": expected true or false");
  return it->get<bool>();
}

// Whitespace character ending exactly at `end`, if any: returns its start.
std::optional<size_t> whitespace_before(std::string_view text, size_t end, size_t limit) {
  size_t start = end;
  while (start > limit && end - start < 4) {
    --start;
    if ((static_cast<uint8_t>(text[start]) & 0xC0) != 0x80) break;  // not a continuation byte
  }
  if (start == end) return std::nullopt;
  Utf8Scan s = scan_utf8(text, start);
  if (s.kind != Utf8Kind::kComplete || start + s.length != end) return std::nullopt;
  if (!is_unicode_whitespace(decode_utf8(text, start, s.length))) return std::nullopt;
  return start;
}

// Length of the whitespace character starting at `pos`, 0 if there is none.
size_t whitespace_at(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  Utf8Scan s = scan_utf8(text, pos);
  if (s.kind != Utf8Kind::kComplete || !is_unicode_whitespace(decode_utf8(text, pos, s.length))) return 0;
  return s.length;
}

}  // namespace

AddedTokenMatcher AddedTokenMatcher::from_json(const nlohmann::json& list, const std::string& source) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return AddedTokenMatcher(std::move(tokens));
  M3_CHECK(list.is_array(), source, ": added_tokens: expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = str_cat(source, ": added_tokens[", i, "]");
    const nlohmann::json& e = list[i];
    M3_CHECK(e.is_object(), path, ": expected an object");
    auto id = e.find("id");
    M3_CHECK(id != e.end() && id->is_number_integer() && id->get<int64_t>() >= 0 && id->get<int64_t>() < (1 << 30),
             path, ".id: missing or not a non-negative integer");
    auto content = e.find("content");
    M3_CHECK(content != e.end() && content->is_string() && !content->get<std::string>().empty(), path,
             ".content: missing or empty");
    // single_word needs HF's notion of word boundaries; no byte-level tokenizer we load uses it.
    M3_CHECK(!bool_field(e, "single_word", path), path, ".single_word: true is not supported");
    AddedToken t;
    t.id = id->get<int32_t>();
    t.content = content->get<std::string>();
    t.special = bool_field(e, "special", path);
    t.lstrip = bool_field(e, "lstrip", path);
    t.rstrip = bool_field(e, "rstrip", path);
    tokens.push_back(std::move(t));
  }
  return AddedTokenMatcher(std::move(tokens));
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
    has_non_special_ |= !tokens_[i].special;
  }
  for (auto& bucket : by_first_byte_) {
    // Longest first so the first hit is the longest match; equal contents keep file order.
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, bool include_special, Match& m) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    for (uint32_t index : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (t.special && !include_special) continue;
      if (text.size() - pos < t.content.size() || std::memcmp(text.data() + pos, t.content.data(), t.content.size()) != 0)
        continue;
      m = Match{pos, pos + t.content.size(), t.id};
      if (t.lstrip) {
        while (auto start = whitespace_before(text, m.begin, from)) m.begin = *start;
      }
      if (t.rstrip) {
        while (size_t len = whitespace_at(text, m.end)) m.end += len;
      }
      return true;
    }
  }
  return false;
}

}  // namespace m3::tok
