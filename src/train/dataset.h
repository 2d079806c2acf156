#pragma once
// Training data: documents (text files, or JSONL with a "text" field per line) tokenized with the
// model's tokenizer into one stream, each document followed by the end-of-text id, cut into
// packed windows of seq + 1 tokens (a window gives seq inputs and their seq next-token targets).
// The last valid_fraction of the stream is the held-out split. Windows are visited in a seeded
// permutation per epoch; the position (epoch, index) is what a checkpoint stores to resume.
#include <cstdint>
#include <string>
#include <vector>

#include "m3/tokenizer.h"

namespace m3::train {

struct TokenStreams {
  std::vector<int32_t> train, valid;
  int64_t documents = 0;
};

// The documents of the files (globs expanded, in order): whole text files, or the "text" of each
// JSONL line.
std::vector<std::string> read_documents(const std::vector<std::string>& files);

// Throws m3::Error naming the file when one is missing, unreadable, not UTF-8 JSONL where .jsonl
// is expected, or when the files hold no text at all.
TokenStreams tokenize_documents(const std::vector<std::string>& files, const Tokenizer& tokenizer, int32_t end_id,
                                double valid_fraction);

// Packed windows over a stream, in a seeded order.
class WindowSampler {
 public:
  WindowSampler(const std::vector<int32_t>& stream, int64_t seq, uint64_t seed);
  int64_t windows() const { return windows_; }
  // The next window's seq inputs and seq targets; advances the position (wrapping into a new epoch
  // with a new permutation).
  void next(int32_t* tokens, int32_t* targets);
  // Window i (in stream order, for evaluation).
  void window(int64_t i, int32_t* tokens, int32_t* targets) const;

  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }
  void seek(int64_t epoch, int64_t index);

 private:
  void shuffle();
  const std::vector<int32_t>& stream_;
  int64_t seq_, windows_;
  uint64_t seed_;
  int64_t epoch_ = 0, index_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace m3::train
