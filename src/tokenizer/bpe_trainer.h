#pragma once
// A small, deterministic byte-level BPE trainer: enough to give test checkpoints a real
// vocabulary (merges with realistic statistics) without shipping a large tokenizer file.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace m3::tok {

struct TrainedBpe {
  // tokens[id] = raw bytes. Ids 0..255 are the single bytes in GPT-2 order (ordered by their
  // stand-in code point: '!'..'~', then U+00A1.., then the remapped control/space bytes),
  // followed by one token per merge.
  std::vector<std::string> tokens;
  std::vector<std::pair<int32_t, int32_t>> merges;  // merge i makes token 256 + i
};

// Learns exactly `num_merges` merges from `text` split by `split_pattern` (Isolated). Each step
// merges the most frequent adjacent pair (ties: smallest left id, then smallest right id). A
// pair whose bytes already form a token is never chosen, so every merge adds a new token.
// Throws m3::Error when the text runs out of pairs before `num_merges`.
TrainedBpe train_byte_level_bpe(std::string_view text, std::string_view split_pattern, int num_merges);

// The built-in sample text (a few KB of prose, dialogue, code, numbers, several scripts, emoji).
std::string_view training_sample();

}  // namespace m3::tok
