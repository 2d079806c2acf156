#pragma once
// tokenizer.json's "added_tokens": strings that are cut out of the text before pre-tokenization
// and map to one id each (the M3 control tokens such as "]~b]" and "<mm:think>").
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace m3::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;  // the match also swallows whitespace on its left
  bool rstrip = false;  // ... and on its right
};

class AddedTokenMatcher {
 public:
  // Parses "added_tokens" (null or an array). Throws m3::Error naming added_tokens[i].field.
  static AddedTokenMatcher from_json(const nlohmann::json& list, const std::string& source);
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens = {});

  struct Match {
    size_t begin, end;  // the text the token replaces (with stripped whitespace)
    int32_t id;
  };
  // Leftmost occurrence at or after `from`, the longest one at that position (as HF's
  // leftmost-longest automaton). Special tokens take part only when `include_special`;
  // non-special added tokens always do, as in HF tokenizers. False when there is none.
  bool find(std::string_view text, size_t from, bool include_special, Match& match) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // True when find() can ever succeed for this setting (lets encode skip the scan).
  bool any(bool include_special) const { return include_special ? !tokens_.empty() : has_non_special_; }

 private:
  std::vector<AddedToken> tokens_;
  // Indices into tokens_, bucketed by first byte, longest content first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
  bool has_non_special_ = false;
};

}  // namespace m3::tok
