// Byte-level BPE training on the built-in sample, and the small tokenizer.json built from it.
#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"

namespace m3::tok {
namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

// The 256 bytes in GPT-2 vocabulary order: sorted by the code point that stands for them.
std::array<uint8_t, 256> gpt2_byte_order() {
  std::array<uint8_t, 256> order;
  for (int b = 0; b < 256; ++b) order[b] = static_cast<uint8_t>(b);
  std::sort(order.begin(), order.end(), [](uint8_t x, uint8_t y) {
    const std::string& a = byte_to_unicode(x);
    const std::string& b = byte_to_unicode(y);
    return decode_utf8(a, 0, a.size()) < decode_utf8(b, 0, b.size());
  });
  return order;
}

// Distinct pre-tokenized words of the text with their counts, in a fixed order.
std::vector<Word> count_words(std::string_view text, std::string_view split_pattern,
                              const std::array<int32_t, 256>& byte_ids) {
  SplitRegex regex(split_pattern, false, "BPE training split pattern");
  std::vector<std::string_view> pieces;
  regex.split(text, pieces);
  std::map<std::string_view, int64_t> counts;
  for (std::string_view p : pieces) ++counts[p];
  std::vector<Word> words;
  for (const auto& [piece, count] : counts) {
    Word w{{}, count};
    for (unsigned char c : piece) w.symbols.push_back(byte_ids[c]);
    words.push_back(std::move(w));
  }
  return words;
}

// The most frequent adjacent pair whose merge would make a new token; nullopt when none is left.
std::optional<std::pair<int32_t, int32_t>> best_pair(const std::vector<Word>& words, const TrainedBpe& bpe,
                                                     const std::unordered_set<std::string>& known) {
  std::unordered_map<uint64_t, int64_t> counts;
  for (const Word& w : words) {
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i) counts[pair_key(w.symbols[i], w.symbols[i + 1])] += w.count;
  }
  uint64_t best_key = 0;
  int64_t best_count = 0;
  for (const auto& [key, count] : counts) {
    // Ties go to the smallest key (left id, then right id) so the result never depends on
    // hash-table order.
    if (count < best_count || (count == best_count && key > best_key)) continue;
    const int32_t a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xFFFFFFFFu);
    if (known.count(bpe.tokens[a] + bpe.tokens[b])) continue;
    best_key = key;
    best_count = count;
  }
  if (best_count == 0) return std::nullopt;
  return std::make_pair(static_cast<int32_t>(best_key >> 32), static_cast<int32_t>(best_key & 0xFFFFFFFFu));
}

void apply_merge(std::vector<Word>& words, int32_t a, int32_t b, int32_t merged) {
  for (Word& w : words) {
    std::vector<int32_t> out;
    out.reserve(w.symbols.size());
    for (size_t i = 0; i < w.symbols.size(); ++i) {
      if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
        out.push_back(merged);
        ++i;
      } else {
        out.push_back(w.symbols[i]);
      }
    }
    w.symbols.swap(out);
  }
}

}  // namespace

TrainedBpe train_byte_level_bpe(std::string_view text, std::string_view split_pattern, int num_merges) {
  M3_CHECK(num_merges >= 0, "BPE training: num_merges must be >= 0, got ", num_merges);
  TrainedBpe bpe;
  std::array<int32_t, 256> byte_ids{};
  for (uint8_t b : gpt2_byte_order()) {
    byte_ids[b] = static_cast<int32_t>(bpe.tokens.size());
    bpe.tokens.push_back(std::string(1, static_cast<char>(b)));
  }
  std::unordered_set<std::string> known(bpe.tokens.begin(), bpe.tokens.end());
  std::vector<Word> words = count_words(text, split_pattern, byte_ids);

  for (int k = 0; k < num_merges; ++k) {
    auto pair = best_pair(words, bpe, known);
    M3_CHECK(pair.has_value(), "BPE training: the sample text supports only ", k, " merges, ", num_merges,
             " were asked for");
    const int32_t merged = static_cast<int32_t>(bpe.tokens.size());
    bpe.tokens.push_back(bpe.tokens[pair->first] + bpe.tokens[pair->second]);
    known.insert(bpe.tokens.back());
    bpe.merges.push_back(*pair);
    apply_merge(words, pair->first, pair->second, merged);
  }
  return bpe;
}

}  // namespace m3::tok

namespace m3 {
namespace {

// MiniMax-M3's added tokens in id order (spec §6: 200000 ... 200060). The small tokenizer gives
// them the ids right after its base vocabulary, keeping this order.
constexpr const char* kM3AddedTokens[] = {
    "]!p~[", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<reponame>", "<filename>",
    "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>", "<jupyter_text>",
    "<jupyter_code>", "<jupyter_output>", "<empty_output>", "<commit_before>", "<commit_msg>", "<commit_after>",
    "]~b]", "[e~[", "]!d~[", "<function_call>", "<code_interpreter>", "]<]speech[>[", "]<]image[>[",
    "]<]video[>[", "]<]start of speech[>[", "]<]end of speech[>[", "]<]start of image[>[", "]<]end of image[>[",
    "]<]start of video[>[", "]<]end of video[>[", "]<]vision pad[>[", "]~!b[", "<jupyter_error>", "<add_file>",
    "<delete_file>", "<rename_file>", "<edit_file>", "<commit_message>", "<empty_source_file>", "<repo_struct>",
    "<code_context>", "<file_content>", "<source_files>", "<pr_start>", "<review_comment>", "<filepath>",
    "<file_sep>", "<think>", "</think>", "<tool_call>", "</tool_call>", "]<]frame[>[", "]<]start of frame[>[",
    "]<]end of frame[>[", "<|content_altered_placeholder|>", "]<]minimax[>[", "<mm:think>", "</mm:think>",
};
static_assert(std::size(kM3AddedTokens) == 61, "spec §6 lists ids 200000..200060");

using ojson = nlohmann::ordered_json;  // keeps fields (and the vocabulary) in the order written

ojson byte_level_json(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return ojson{{"type", "ByteLevel"},
               {"add_prefix_space", add_prefix_space},
               {"trim_offsets", trim_offsets},
               {"use_regex", use_regex}};
}

ojson model_json(const tok::TrainedBpe& bpe) {
  ojson vocab = ojson::object();
  for (size_t id = 0; id < bpe.tokens.size(); ++id) vocab[tok::bytes_to_unicode(bpe.tokens[id])] = id;
  ojson merges = ojson::array();
  for (const auto& [a, b] : bpe.merges) {
    merges.push_back(ojson::array({tok::bytes_to_unicode(bpe.tokens[a]), tok::bytes_to_unicode(bpe.tokens[b])}));
  }
  return ojson{{"type", "BPE"},
               {"dropout", nullptr},
               {"unk_token", nullptr},
               {"continuing_subword_prefix", nullptr},
               {"end_of_word_suffix", nullptr},
               {"fuse_unk", false},
               {"byte_fallback", false},
               {"ignore_merges", false},
               {"vocab", std::move(vocab)},
               {"merges", std::move(merges)}};
}

}  // namespace

std::string make_small_tokenizer_json(int num_merges) {
  const tok::TrainedBpe bpe = tok::train_byte_level_bpe(tok::training_sample(), tok::kM3SplitPattern, num_merges);
  const size_t base_vocab_size = bpe.tokens.size();

  ojson added = ojson::array();
  for (size_t i = 0; i < std::size(kM3AddedTokens); ++i) {
    added.push_back(ojson{{"id", base_vocab_size + i},
                          {"content", kM3AddedTokens[i]},
                          {"single_word", false},
                          {"lstrip", false},
                          {"rstrip", false},
                          {"normalized", false},
                          {"special", true}});
  }
  ojson split{{"type", "Split"},
              {"pattern", {{"Regex", std::string(tok::kM3SplitPattern)}}},
              {"behavior", "Isolated"},
              {"invert", false}};
  ojson root{{"version", "1.0"},
             {"truncation", nullptr},
             {"padding", nullptr},
             {"added_tokens", std::move(added)},
             {"normalizer", nullptr},
             {"pre_tokenizer",
              {{"type", "Sequence"}, {"pretokenizers", ojson::array({split, byte_level_json(false, true, false)})}}},
             {"post_processor", byte_level_json(false, false, false)},
             {"decoder", byte_level_json(true, true, true)},
             {"model", model_json(bpe)}};
  return root.dump(2, ' ', /*ensure_ascii=*/false) + "\n";
}

}  // namespace m3
