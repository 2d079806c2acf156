// The runtime's decode loop step by step, on logits chosen by the test (a one-hot argmax per step,
// greedy sampling), with the tiny checkpoint's tokenizer: what each step emits and feeds, and why
// the generation ends.
#include <gtest/gtest.h>

#include "tiny_model.h"

#include "m3/chat/m3_format.h"
#include "m3/chat/thinking_budget.h"
#include "m3/generation.h"

namespace {

using m3::FinishReason;
using m3::GenerationConfig;
using m3::TokenEvent;
using m3::TokenGenerator;

class TokenGeneratorTest : public m3::test::TinyModelSuite<TokenGeneratorTest> {
 public:
  static constexpr const char* kName = "token_generator";
  static constexpr uint64_t kSeed = 5;

 protected:
  const m3::Tokenizer& tok() const { return engine().tokenizer(); }
  int vocab() const { return tok().vocab_size(); }
  std::vector<float> pick(int32_t id, float value = 10.0f) const {
    std::vector<float> l(size_t(engine().model().vocab_size()), 0.0f);
    l[size_t(id)] = value;
    return l;
  }
  GenerationConfig config(int64_t max_tokens) const {
    GenerationConfig g;
    g.max_tokens = max_tokens;
    g.sample_vocab = vocab();
    return g;
  }
  // Steps with each id of `ids` as the argmax; returns the text released (finish() included).
  std::string run(TokenGenerator& gen, const std::vector<int32_t>& ids, size_t* steps = nullptr) const {
    std::string text;
    std::vector<TokenEvent> events;
    std::vector<int32_t> feed;
    size_t n = 0;
    for (int32_t id : ids) {
      events.clear();
      ++n;
      const std::vector<float> l = pick(id);
      const bool more = gen.step(l.data(), events, feed);
      for (const auto& ev : events) text += ev.text;
      if (!more) break;
    }
    if (steps) *steps = n;
    return text + gen.finish();
  }
};

TEST_F(TokenGeneratorTest, TextIsTheDecodedTokens) {
  const std::vector<int32_t> ids = tok().encode("hello world, again");
  TokenGenerator gen(tok(), config(64), {1, 2, 3});
  EXPECT_EQ(run(gen, ids), "hello world, again");
  EXPECT_EQ(gen.generated(), ids);
  EXPECT_EQ(gen.finish_reason(), FinishReason::None);
}

TEST_F(TokenGeneratorTest, AStopStringCutsTheTextAndEndsTheGeneration) {
  const std::vector<int32_t> ids = tok().encode("one two END three four");
  GenerationConfig g = config(64);
  g.stop = {"END"};
  TokenGenerator gen(tok(), g, {1});
  size_t steps = 0;
  EXPECT_EQ(run(gen, ids, &steps), "one two ");
  EXPECT_EQ(gen.finish_reason(), FinishReason::StopString);
  EXPECT_LT(steps, ids.size());  // it stopped at the token that completed "END"
}

TEST_F(TokenGeneratorTest, EndOfTurnIsTheLastEventAndHasNoText) {
  const int32_t eot = tok().require_token(m3::chat::kTurnEnd);
  const std::vector<int32_t> hi = tok().encode("hi");
  std::vector<int32_t> ids = hi;
  ids.push_back(eot);
  ids.push_back(hi[0]);
  TokenGenerator gen(tok(), config(64), {1});
  EXPECT_EQ(run(gen, ids), "hi");
  EXPECT_EQ(gen.finish_reason(), FinishReason::EndOfTurn);
  EXPECT_EQ(gen.generated().back(), eot);  // counted, like OpenAI's completion_tokens
  EXPECT_EQ(gen.unfed(), 1);               // and never fed back

  GenerationConfig g = config(int64_t(ids.size()));
  g.stop_at_end_of_turn = false;  // --ignore-eos: the marker is text
  TokenGenerator free(tok(), g, {1});
  EXPECT_EQ(run(free, ids), "hi" + std::string(m3::chat::kTurnEnd) + tok().decode({hi[0]}));
  EXPECT_EQ(free.finish_reason(), FinishReason::Length);
}

TEST_F(TokenGeneratorTest, MaxTokensEndsIt) {
  const std::vector<int32_t> ids = tok().encode("a b c d e f g h");
  ASSERT_GT(ids.size(), 3u);
  TokenGenerator gen(tok(), config(3), {1});
  size_t steps = 0;
  run(gen, ids, &steps);
  EXPECT_EQ(steps, 3u);
  EXPECT_EQ(gen.generated().size(), 3u);
  EXPECT_EQ(gen.finish_reason(), FinishReason::Length);
  EXPECT_EQ(gen.unfed(), 1);  // the last token was sampled but not fed
}

TEST_F(TokenGeneratorTest, TheThinkingCapForcesTheCloserInTheSameStep) {
  const auto markers = m3::chat::ThinkingMarkers::from_tokenizer(tok());
  const std::vector<int32_t> ids = tok().encode("x y z w");
  GenerationConfig g = config(64);
  g.reasoning = m3::ReasoningOptions{/*prompt_opened=*/true, /*may_open=*/false, /*max_tokens=*/2};
  TokenGenerator gen(tok(), g, {1, markers.open});
  std::vector<TokenEvent> events;
  std::vector<int32_t> feed;
  std::vector<float> l = pick(ids[0]);
  ASSERT_TRUE(gen.step(l.data(), events, feed));
  EXPECT_EQ(feed, std::vector<int32_t>{ids[0]});
  events.clear();
  l = pick(ids[1]);
  ASSERT_TRUE(gen.step(l.data(), events, feed));
  // The second reasoning token reaches the cap: the closer follows it, fed together.
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].sampled);
  EXPECT_EQ(events[1].id, markers.close);
  EXPECT_FALSE(events[1].sampled);
  EXPECT_EQ(feed, (std::vector<int32_t>{ids[1], markers.close}));
  EXPECT_EQ(gen.unfed(), 2);
  EXPECT_EQ(gen.forced_tokens(), 1);
  EXPECT_EQ(gen.reasoning_tokens(), 2);
}

TEST_F(TokenGeneratorTest, AZeroCapClosesTheThoughtBeforeAnythingIsSampled) {
  const auto markers = m3::chat::ThinkingMarkers::from_tokenizer(tok());
  GenerationConfig g = config(64);
  g.reasoning = m3::ReasoningOptions{true, false, 0};
  TokenGenerator gen(tok(), g, {1, markers.open});
  std::vector<TokenEvent> events;
  std::vector<int32_t> feed;
  const std::vector<float> l = pick(tok().encode("q")[0]);  // ignored: nothing is sampled
  ASSERT_TRUE(gen.step(l.data(), events, feed));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id, markers.close);
  EXPECT_FALSE(events[0].sampled);
  EXPECT_EQ(gen.reasoning_tokens(), 0);
}

TEST_F(TokenGeneratorTest, JsonModeTakesTheBestTokenThatKeepsAJsonObject) {
  const int32_t word = tok().encode("hello")[0];
  const int32_t brace = tok().encode("{")[0];
  GenerationConfig g = config(64);
  g.json_object = true;
  TokenGenerator gen(tok(), g, {1});
  std::vector<float> l = pick(word, 10.0f);
  l[size_t(brace)] = 5.0f;  // second best, but the only JSON start among the two
  std::vector<TokenEvent> events;
  std::vector<int32_t> feed;
  ASSERT_TRUE(gen.step(l.data(), events, feed));
  EXPECT_EQ(feed, std::vector<int32_t>{brace});
  // Close it: the next step ends the answer before sampling.
  const int32_t close = tok().encode("}")[0];
  l = pick(close);
  ASSERT_TRUE(gen.step(l.data(), events, feed));
  EXPECT_FALSE(gen.step(l.data(), events, feed));
  EXPECT_EQ(gen.finish_reason(), FinishReason::EndOfTurn);
  EXPECT_EQ(gen.generated(), (std::vector<int32_t>{brace, close}));
}

}  // namespace
