#include "m3/prompt.h"

#include <algorithm>
#include <cstring>

#include "m3/error.h"
#include "runtime/engine.h"
#include "vision/image_prompt.h"
#include "vision/media_prompt.h"

namespace m3 {

namespace {

// FNV-1a over the feature bits: the identity of what the rows feed.
uint64_t hash_features(const std::vector<float>& f) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(f.data());
  for (size_t i = 0; i < f.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// A negative key for row `row` of an item with feature hash h (splitmix64 finaliser).
int32_t media_row_key(uint64_t h, int64_t row) {
  uint64_t x = h + uint64_t(row) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return -1 - int32_t(x % 2147483646ull);
}

}  // namespace

void Prompt::append_tokens(const int32_t* ids, size_t n) {
  ids_.insert(ids_.end(), ids, ids + n);
  keys_.insert(keys_.end(), ids, ids + n);
}

void Prompt::append_media(const Tokenizer& tok, std::shared_ptr<const EncodedMedia> item) {
  M3_CHECK(item != nullptr, "prompt: no media item");
  std::vector<int64_t> rows;
  vision::append_media_tokens(tok, item->layout, ids_, rows);
  const int64_t total = item->layout.tokens_per_group * int64_t(item->layout.group_prefix.size());
  M3_CHECK(int64_t(rows.size()) == total && !rows.empty(), "prompt: media item ", items_ + 1, " has ", rows.size(),
           " placeholder tokens for ", total, " rows");
  M3_CHECK(item->features.size() % rows.size() == 0 && !item->features.empty(), "prompt: media item ", items_ + 1,
           " has ", item->features.size(), " feature values for ", rows.size(), " rows");
  const uint64_t h = hash_features(item->features);
  keys_.insert(keys_.end(), ids_.begin() + int64_t(keys_.size()), ids_.end());
  for (size_t k = 0; k < rows.size(); ++k) {
    keys_[size_t(rows[k])] = media_row_key(h, int64_t(k));
    if (k > 0 && rows[k] == rows[k - 1] + 1) runs_.back().count++;
    else runs_.push_back(Run{rows[k], 1, item, int64_t(k)});
  }
  ++items_;
}

size_t Prompt::append_expanding(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                const std::vector<std::shared_ptr<const EncodedMedia>>& items, size_t first) {
  const std::optional<int32_t> image = tok.token_id(vision::kImagePlaceholder);
  const std::optional<int32_t> video = tok.token_id(vision::kVideoPlaceholder);
  size_t next = first;
  size_t plain_from = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool is_image = image && ids[i] == *image, is_video = video && ids[i] == *video;
    if (!is_image && !is_video) continue;
    append_tokens(ids.data() + plain_from, i - plain_from);
    plain_from = i + 1;
    M3_CHECK(next < items.size(), "prompt: more media placeholders than images and videos (", items.size() - first,
             ")");
    const auto& item = items[next++];
    M3_CHECK(is_video == (item->layout.kind == vision::MediaKind::Video), "prompt: media placeholder ", next - first,
             " is a", is_video ? " video" : "n image", " placeholder but its item is not");
    append_media(tok, item);
  }
  append_tokens(ids.data() + plain_from, ids.size() - plain_from);
  return next - first;
}

bool Prompt::has_media_from(int64_t from) const {
  return std::any_of(runs_.begin(), runs_.end(), [&](const Run& r) { return r.first + r.count > from; });
}

void Prompt::input_rows(const TextModel& model, int64_t from, int64_t n, float* out) const {
  M3_CHECK(from >= 0 && n >= 0 && from + n <= size(), "prompt: rows ", from, "..", from + n, " of ", size());
  const int64_t H = model.config().hidden_size;
  model.embed(ids_.data() + from, n, out);
  for (const Run& r : runs_) {
    M3_CHECK(int64_t(r.item->features.size()) >= (r.item_row + r.count) * H, "prompt: a media item has ",
             r.item->features.size() / size_t(H), " feature rows of width ", H, " but fills row ", r.item_row + r.count);
    const int64_t lo = std::max(r.first, from), hi = std::min(r.first + r.count, from + n);
    for (int64_t p = lo; p < hi; ++p)
      std::memcpy(out + (p - from) * H, r.item->features.data() + (r.item_row + p - r.first) * H,
                  sizeof(float) * size_t(H));
  }
}

std::vector<float> Prompt::input_rows(const TextModel& model) const {
  std::vector<float> x(size_t(size()) * size_t(model.config().hidden_size));
  input_rows(model, 0, size(), x.data());
  return x;
}

std::vector<float> Prompt::input_rows(const Engine& engine) const { return input_rows(engine.model()); }

}  // namespace m3
