#pragma once
// A compiled split pattern (PCRE2, UTF + Unicode properties, JIT when available) and the
// pre-tokenizer pipeline built from tokenizer.json's "pre_tokenizer" field.
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace m3::tok {

// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex true.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The o200k-style pattern of MiniMax-M3 (spec §6). The punctuation branch ends in `[\r\n/]*`:
// that is OpenAI's o200k_base pattern and what llama.cpp quotes from the MiniMax tokenizer.json;
// one third-party tiktoken port writes `[\r\n]*`, which we take to be a transcription slip.
inline constexpr std::string_view kM3SplitPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Pieces of text produced by pre-tokenization. Most are views into the caller's text; pieces
// that had to be built (a prepended space) live in `owned`, which a deque keeps stable.
struct Pieces {
  std::vector<std::string_view> views;
  std::deque<std::string> owned;
};

class SplitRegex {
 public:
  // `field` names the tokenizer.json field the pattern came from, for the error message.
  // `literal` treats the pattern as plain text (a Split with {"String": ...}).
  SplitRegex(std::string_view pattern, bool literal, const std::string& field);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // "Isolated" split: every match and every stretch between matches becomes a piece, in order.
  // Input need not be valid UTF-8: each byte that is not part of a valid character becomes a
  // one-byte piece of its own and the pattern runs on the valid stretches between such bytes, as if
  // they were separate texts. So invalid input never fails, and its bytes come back unchanged.
  // Safe to call from several threads at once.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Compiled;
  struct MatchData;
  void split_valid(std::string_view text, MatchData& data, std::vector<std::string_view>& out) const;

  std::unique_ptr<Compiled> compiled_;
  std::string field_;
};

// One step of pre-tokenization. Split(pattern, Isolated) and ByteLevel (whose byte mapping
// is done by the model on raw bytes, so here it only adds the prefix space and/or GPT-2 split).
struct PreTokenizerStep {
  std::shared_ptr<const SplitRegex> regex;  // null: no splitting in this step
  bool add_prefix_space = false;
};

class PreTokenizer {
 public:
  // Parses tokenizer.json's "pre_tokenizer" (null, one pre-tokenizer, or a Sequence).
  // Throws m3::Error naming the field (e.g. "pre_tokenizer.pretokenizers[0].behavior").
  static PreTokenizer from_json(const nlohmann::json& node, const std::string& source);
  static PreTokenizer from_steps(std::vector<PreTokenizerStep> steps);

  // Replaces pieces.views by their pre-tokenized pieces, in order.
  void run(std::string_view text, Pieces& pieces) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace m3::tok
