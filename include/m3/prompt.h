#pragma once
// A model input: token ids in order, with the positions whose input rows are vision features (spec
// §5.3), and per position the key that prefix reuse compares. The one place that puts media rows
// into a prompt: `m3 generate`, `m3 logits`, `m3 chat` and the server all build a Prompt and take
// its input rows from here.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "m3/media.h"
#include "m3/tokenizer.h"

namespace m3 {

class Engine;
class TextModel;

class Prompt {
 public:
  // Plain tokens (no media rows); their keys are the ids.
  void append_tokens(const int32_t* ids, size_t n);
  void append_tokens(const std::vector<int32_t>& ids) { append_tokens(ids.data(), ids.size()); }
  // One item's tokens (spec §5.3: per group its prefix text, start, the placeholders, end); its
  // placeholder rows take the item's features. Their keys are negative values derived from the features, so two prompts share
  // a key there exactly when they feed the same rows (token ids are >= 0).
  void append_media(const Tokenizer& tok, std::shared_ptr<const EncodedMedia> item);
  // `ids` with one `]<]image[>[` or `]<]video[>[` token per item (what the chat template writes),
  // each expanded with the next of items[first..]; returns how many items were used. Throws
  // m3::Error when the kinds do not match or items run out.
  size_t append_expanding(const Tokenizer& tok, const std::vector<int32_t>& ids,
                          const std::vector<std::shared_ptr<const EncodedMedia>>& items, size_t first = 0);

  const std::vector<int32_t>& ids() const { return ids_; }
  const std::vector<int32_t>& keys() const { return keys_; }
  int64_t size() const { return int64_t(ids_.size()); }
  bool empty() const { return ids_.empty(); }
  bool has_media() const { return !runs_.empty(); }
  // Whether any of positions [from, size()) is a media row.
  bool has_media_from(int64_t from) const;
  size_t media_items() const { return items_; }

  // Input rows of positions [from, from + n) into out (n, hidden): token embeddings, with the
  // media rows in place. (TextModel is the engine's: Engine::model().)
  void input_rows(const TextModel& model, int64_t from, int64_t n, float* out) const;
  std::vector<float> input_rows(const TextModel& model) const;  // all of them
  std::vector<float> input_rows(const Engine& engine) const;

 private:
  struct Run {  // consecutive media rows of one item (an image, or one group of a video)
    int64_t first = 0, count = 0;  // positions
    std::shared_ptr<const EncodedMedia> item;
    int64_t item_row = 0;  // the item's feature row of position `first`
  };
  std::vector<int32_t> ids_, keys_;
  std::vector<Run> runs_;  // by position
  size_t items_ = 0;
};

// A prompt built from text and media in one go (`m3 generate`, `m3 logits`).
struct MultimodalPrompt {
  Prompt prompt;  // the expanded token stream with its media rows
  std::vector<std::shared_ptr<const EncodedMedia>> items;  // images and videos in stream order
};

// Parts in prompt order, each item encoded. Throws m3::Error naming the file or the field when the
// checkpoint has no vision tower or an item cannot be read.
MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::vector<PromptPart>& parts,
                                         const MultimodalOptions& options = {});
// Text with `]<]image[>[` / `]<]video[>[` placeholders: the i-th image placeholder is the i-th
// image, the j-th video placeholder the j-th video; a kind without placeholders goes after the text.
MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::string& text,
                                         const std::vector<std::string>& image_paths,
                                         const std::vector<std::string>& video_paths,
                                         const MultimodalOptions& options = {});

}  // namespace m3
