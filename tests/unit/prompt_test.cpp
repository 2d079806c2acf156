// Media rows in a prompt (runtime/prompt.h): placeholders expand to the spec's token layout, the
// rows of an item take its features at every window the callers ask for, and prefix-cache keys
// tell items apart by their features.
#include <gtest/gtest.h>

#include "tiny_model.h"

#include "m3/error.h"
#include "m3/prompt.h"
#include "vision/image_prompt.h"
#include "vision/media_prompt.h"

namespace {

using m3::EncodedMedia;
using m3::Prompt;
using m3::vision::MediaKind;

std::shared_ptr<const EncodedMedia> item(MediaKind kind, int64_t per_group, std::vector<std::string> groups, int64_t H,
                                         uint32_t seed) {
  return m3::test::random_media(kind, per_group, std::move(groups), H, seed);
}

class PromptTest : public m3::test::TinyModelSuite<PromptTest> {
 public:
  static constexpr const char* kName = "prompt";
  static constexpr uint64_t kSeed = 7;

 protected:
  const m3::Tokenizer& tok() const { return engine().tokenizer(); }
  const m3::TextModel& model() const { return engine().model(); }
  int64_t H() const { return model().config().hidden_size; }
};

TEST_F(PromptTest, PlaceholdersExpandAndTheirRowsTakeTheFeatures) {
  const int32_t image = tok().require_token(m3::vision::kImagePlaceholder);
  const int32_t video = tok().require_token(m3::vision::kVideoPlaceholder);
  const int32_t start = tok().require_token("]<]start of image[>["), end = tok().require_token("]<]end of image[>[");
  const auto img = item(MediaKind::Image, 3, {""}, H(), 1);
  const auto vid = item(MediaKind::Video, 2, {"]<]0.0 seconds[>[", "]<]2.0 seconds[>["}, H(), 2);
  const std::vector<int32_t> a = tok().encode("look"), b = tok().encode("and");
  std::vector<int32_t> ids = a;
  ids.push_back(image);
  ids.insert(ids.end(), b.begin(), b.end());
  ids.push_back(video);
  Prompt p;
  ASSERT_EQ(p.append_expanding(tok(), ids, {img, vid}), 2u);
  EXPECT_EQ(p.media_items(), 2u);

  // The layout: text, start + 3 image rows + end, text, per group: timestamp text, start + 2 + end.
  std::vector<int32_t> want = a;
  want.insert(want.end(), {start, image, image, image, end});
  want.insert(want.end(), b.begin(), b.end());
  for (const char* ts : {"]<]0.0 seconds[>[", "]<]2.0 seconds[>["}) {
    const auto t = tok().encode(ts);
    want.insert(want.end(), t.begin(), t.end());
    want.insert(want.end(), {start, video, video, end});
  }
  EXPECT_EQ(p.ids(), want);

  // All rows: token embeddings except the media rows, which are the items' features in order.
  const std::vector<float> rows = p.input_rows(model());
  std::vector<float> emb(want.size() * size_t(H()));
  model().embed(want.data(), int64_t(want.size()), emb.data());
  std::vector<const float*> media_rows;
  for (int k = 0; k < 3; ++k) media_rows.push_back(img->features.data() + k * H());
  for (int k = 0; k < 4; ++k) media_rows.push_back(vid->features.data() + k * H());
  size_t next = 0;
  for (size_t pos = 0; pos < want.size(); ++pos) {
    const bool media = want[pos] == image || want[pos] == video;
    const float* expect = media ? media_rows[next++] : emb.data() + pos * size_t(H());
    for (int64_t c = 0; c < H(); ++c) ASSERT_EQ(rows[pos * size_t(H()) + size_t(c)], expect[c]) << pos << "," << c;
    EXPECT_EQ(p.keys()[pos] < 0, media) << pos;
  }
  EXPECT_EQ(next, media_rows.size());

  // Any window gives the same rows as the whole (chunked prefill, prefix reuse).
  for (int64_t from = 0; from < p.size(); from += 3)
    for (int64_t n : {int64_t(1), int64_t(4), p.size() - from}) {
      if (from + n > p.size()) continue;
      std::vector<float> w(size_t(n * H()));
      p.input_rows(model(), from, n, w.data());
      EXPECT_TRUE(std::equal(w.begin(), w.end(), rows.begin() + from * H())) << from << "+" << n;
    }
  EXPECT_TRUE(p.has_media_from(0));
  EXPECT_FALSE(p.has_media_from(p.size() - 1));  // the last `end` token
}

TEST_F(PromptTest, KeysTellItemsApartByTheirFeatures) {
  const auto a = item(MediaKind::Image, 4, {""}, H(), 10);
  const auto same = std::make_shared<const EncodedMedia>(*a);  // another copy of the same features
  const auto other = item(MediaKind::Image, 4, {""}, H(), 11);
  Prompt pa, ps, po;
  pa.append_media(tok(), a);
  ps.append_media(tok(), same);
  po.append_media(tok(), other);
  EXPECT_EQ(pa.ids(), po.ids());    // the same tokens...
  EXPECT_EQ(pa.keys(), ps.keys());  // ...the same keys for the same rows...
  EXPECT_NE(pa.keys(), po.keys());  // ...and others for other rows
  std::vector<int32_t> distinct(pa.keys());
  std::sort(distinct.begin(), distinct.end());
  EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end());  // rows differ from each other too
}

TEST_F(PromptTest, MismatchedPlaceholdersAreErrors) {
  const int32_t image = tok().require_token(m3::vision::kImagePlaceholder);
  const auto vid = item(MediaKind::Video, 2, {""}, H(), 3);
  Prompt p;
  EXPECT_THROW(p.append_expanding(tok(), {image}, {vid}), m3::Error);  // an image placeholder, a video item
  Prompt q;
  EXPECT_THROW(q.append_expanding(tok(), {image, image}, {item(MediaKind::Image, 1, {""}, H(), 4)}), m3::Error);
  // Features that cannot fill the rows are refused when the rows are read.
  auto short_item = std::make_shared<EncodedMedia>(*item(MediaKind::Image, 2, {""}, H(), 5));
  short_item->features.resize(size_t(H()));
  Prompt r;
  EXPECT_THROW(
      {
        r.append_media(tok(), short_item);
        r.input_rows(model());
      },
      m3::Error);
}

}  // namespace
