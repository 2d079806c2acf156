// The serial driver of the decode loop (runtime/session.h) on the tiny checkpoint: prefix reuse
// gives the tokens a cold session gives, an interrupted prefill keeps its chunks, media rows go in
// as input rows whatever the chunking, and a forward that throws leaves the next call a clean start.
#include <gtest/gtest.h>

#include "tiny_model.h"

#include "m3/session.h"
#include "runtime/sampler.h"

namespace {

using m3::Prompt;
using m3::Session;
using m3::SessionOptions;
using m3::SessionStats;

class SessionTest : public m3::test::TinyModelSuite<SessionTest> {
 public:
  static constexpr const char* kName = "session";
  static constexpr uint64_t kSeed = 9;

 protected:
  int vocab() { return engine().tokenizer().vocab_size(); }
  Prompt tokens(int n, int salt) {
    Prompt p;
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 37 + salt * 11 + 5) % vocab()));
    p.append_tokens(ids);
    return p;
  }
  m3::GenerationConfig greedy(int n) {
    m3::GenerationConfig g;
    g.max_tokens = n;
    g.sample_vocab = vocab();
    g.stop_at_end_of_turn = false;
    return g;
  }
};

TEST_F(SessionTest, ReuseGivesTheTokensOfAColdSession) {
  const int B = engine().model().cache_shape().block_size;
  Session warm(engine(), SessionOptions{});
  const Prompt first = tokens(3 * B + 5, 1);
  const SessionStats a = warm.generate(first, greedy(6), {});
  EXPECT_EQ(a.reused_tokens, 0);
  EXPECT_EQ(a.prefilled_tokens, first.size());
  // What the cache holds: the prompt and every generated token but the last (never fed).
  EXPECT_EQ(warm.cached_tokens(), first.size() + 5);

  // The next prompt continues the conversation: the prompt, the reply, then new tokens.
  Prompt next = first;
  next.append_tokens(a.generated);
  next.append_tokens(tokens(B + 3, 2).ids());
  const SessionStats b = warm.generate(next, greedy(6), {});
  EXPECT_EQ(b.reused_tokens, first.size() + 5);
  EXPECT_EQ(b.prefilled_tokens, next.size() - b.reused_tokens);

  SessionOptions chunked;
  chunked.prefill_chunk = 7;
  Session cold(engine(), chunked);
  const SessionStats c = cold.generate(next, greedy(6), {});
  EXPECT_EQ(c.reused_tokens, 0);
  EXPECT_EQ(b.generated, c.generated);

  // A different prompt sharing only a head reuses just that head.
  Prompt other = tokens(2 * B, 1);  // the first 2B tokens of `first`
  other.append_tokens(tokens(9, 3).ids());
  const SessionStats d = warm.generate(other, greedy(2), {});
  EXPECT_EQ(d.reused_tokens, 2 * B);
}

TEST_F(SessionTest, AnInterruptedPrefillKeepsTheChunksDone) {
  SessionOptions o;
  o.prefill_chunk = 16;
  Session s(engine(), o);
  const Prompt p = tokens(50, 4);
  m3::SessionCallbacks cb;
  int chunks = 0;
  cb.on_prefill = [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 50);
    EXPECT_EQ(done, 16 * (chunks + 1));
    return ++chunks < 2;  // stop after the second chunk
  };
  bool sampled = false;
  cb.on_token = [&](const m3::TokenEvent&) { return sampled = true; };
  const SessionStats st = s.generate(p, greedy(4), cb);
  EXPECT_TRUE(st.prefill_interrupted);
  EXPECT_FALSE(sampled);
  EXPECT_EQ(st.prefilled_tokens, 32);
  EXPECT_EQ(s.cached_tokens(), 32);
  const SessionStats again = s.generate(p, greedy(4), {});
  EXPECT_EQ(again.reused_tokens, 32);
  EXPECT_EQ(again.generated.size(), 4u);
}

TEST_F(SessionTest, StoppingAfterATokenKeepsWhatWasFed) {
  Session s(engine(), SessionOptions{});
  const Prompt p = tokens(20, 5);
  m3::SessionCallbacks cb;
  int seen = 0;
  cb.on_token = [&](const m3::TokenEvent&) { return ++seen < 3; };
  const SessionStats st = s.generate(p, greedy(10), cb);
  EXPECT_TRUE(st.interrupted);
  EXPECT_EQ(st.generated.size(), 3u);
  EXPECT_EQ(s.cached_tokens(), 20 + 2);
}

TEST_F(SessionTest, MediaRowsGoInAsInputRowsWhateverTheChunking) {
  const int64_t H = engine().model().config().hidden_size;
  const auto img = m3::test::random_media(m3::vision::MediaKind::Image, 5, {""}, H, 3);
  Prompt p = tokens(9, 6);
  p.append_media(engine().tokenizer(), img);
  p.append_tokens(tokens(4, 7).ids());

  // The first token is the argmax of the logits of the prompt's input rows, run in one pass.
  std::vector<float> logits;
  m3::KvCache cache(engine().model().cache_shape());
  const std::vector<float> rows = p.input_rows(engine().model());
  engine().model().forward_embeddings(cache, rows.data(), p.size(), m3::LogitsFor::Last, logits);
  const int32_t first = m3::argmax(logits.data(), vocab());

  std::vector<int32_t> reference;
  for (int chunk : {512, 3}) {
    SessionOptions o;
    o.prefill_chunk = chunk;
    Session s(engine(), o);
    const SessionStats st = s.generate(p, greedy(5), {});
    EXPECT_EQ(st.generated.front(), first) << "chunk " << chunk;
    if (reference.empty()) reference = st.generated;
    EXPECT_EQ(st.generated, reference) << "chunk " << chunk;
  }

  // The same tokens with other features: no reuse past the media rows.
  Session s(engine(), SessionOptions{});
  s.generate(p, greedy(1), {});
  auto other = std::make_shared<m3::EncodedMedia>(*img);
  other->features[0] += 1.0f;
  Prompt q = tokens(9, 6);
  q.append_media(engine().tokenizer(), other);
  q.append_tokens(tokens(4, 7).ids());
  const SessionStats st = s.generate(q, greedy(1), {});
  EXPECT_EQ(st.reused_tokens, 10);  // the text and the start-of-image token
}

TEST_F(SessionTest, WithoutReuseEveryCallStartsFromNothing) {
  SessionOptions o;
  o.reuse_prefix = false;
  Session s(engine(), o);
  const Prompt p = tokens(30, 8);
  const SessionStats a = s.generate(p, greedy(3), {});
  const SessionStats b = s.generate(p, greedy(3), {});
  EXPECT_EQ(b.reused_tokens, 0);
  EXPECT_EQ(a.generated, b.generated);
}

}  // namespace
