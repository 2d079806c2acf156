#include <gtest/gtest.h>

#include <map>

#include "m3/error.h"
#include "memory/kv_cache.h"
#include "runtime/sampler.h"

using namespace m3;

TEST(Sampler, GreedyPicksArgmaxWithSmallerIdOnTies) {
  Sampler s(SamplingParams{});
  const float logits[] = {1.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(s.sample(logits, 4, {}, 0), 1);
}

TEST(Sampler, SeedMakesDrawsReproducible) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  const float logits[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits, 5, {}, 0), b.sample(logits, 5, {}, 0));
}

TEST(Sampler, TopKAndTopPAndMinPRestrictTheCandidates) {
  const float logits[] = {5.0f, 4.9f, 0.0f, -1.0f, -2.0f};
  auto draws = [&](SamplingParams p) {
    Sampler s(p);
    std::map<int, int> seen;
    for (int i = 0; i < 400; ++i) seen[s.sample(logits, 5, {}, 0)]++;
    return seen;
  };
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  auto k = draws(p);
  EXPECT_EQ(k.size(), 2u);
  p.top_k = 0;
  p.top_p = 0.5f;  // the first token alone has ~0.5; at most the top two survive
  for (auto& [id, n] : draws(p)) EXPECT_LT(id, 2);
  p.top_p = 1.0f;
  p.min_p = 0.5f;
  for (auto& [id, n] : draws(p)) EXPECT_LT(id, 2);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  const float logits[] = {2.0f, 1.5f};
  EXPECT_EQ(s.sample(logits, 2, {0}, 0), 1);  // 2.0 / 2 = 1.0 < 1.5
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountOnlyGeneratedTokens) {
  const float logits[] = {3.0f, 2.5f, 1.0f};
  // Token 0 is in the prompt (history[0]) and was generated twice (history[2], history[3]).
  const std::vector<int32_t> history = {0, 1, 0, 0};
  SamplingParams p;
  p.presence_penalty = 0.4f;  // 3.0 - 0.4 = 2.6 > 2.5: token 0 still wins
  EXPECT_EQ(Sampler(p).sample(logits, 3, history, 2), 0);
  p.frequency_penalty = 0.1f;  // 3.0 - 0.4 - 2 * 0.1 = 2.4 < 2.5
  EXPECT_EQ(Sampler(p).sample(logits, 3, history, 2), 1);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.3f;  // token 0 counts 2 in the output: 3.0 - 0.6 = 2.4; token 1 is prompt only
  EXPECT_EQ(Sampler(p).sample(logits, 3, history, 2), 1);
  EXPECT_EQ(Sampler(p).sample(logits, 3, history, 4), 0);  // nothing generated yet: no penalty
  p.frequency_penalty = -1.0f;  // negative values favour repeats
  const float close[] = {1.0f, 2.5f};
  EXPECT_EQ(Sampler(p).sample(close, 2, {0, 0}, 0), 0);  // 1.0 + 2 = 3.0 > 2.5
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.temperature = -1.0f;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.frequency_penalty = -3.0f;
  EXPECT_THROW(p.validate(), Error);
}

TEST(KvCache, PagesFollowBlocksAndTruncateFreesThem) {
  KvCacheShape shape;
  shape.num_layers = 2;
  shape.block_size = 4;
  shape.kv_heads = 2;
  shape.head_dim = 3;
  shape.index_dim = 5;
  shape.layer_has_index = {false, true};
  KvCache c(shape);
  c.ensure_capacity(9);  // 3 blocks
  EXPECT_EQ(c.num_pages(), 3 * 2 + 3);
  const float k[3] = {1.0f, 2.0f, 7.0f}, v[3] = {4.0f, 5.0f, 6.0f};
  c.write_kv(1, 6, 1, k, v);                          // block 1, slot 2
  EXPECT_EQ(c.k_block_t(1, 1, 1).as<float>()[2 * 4 + 2], 7.0f);  // K transposed: [dim][slot]
  EXPECT_EQ(c.v_block(1, 1, 1).as<float>()[2 * 3 + 1], 5.0f);    // V natural: [slot][dim]
  const float ik[5] = {0, 0, 0, 0, 3.0f};
  c.write_index_k(1, 5, ik);                          // block 1, slot 1
  EXPECT_EQ(c.index_k_block_t(1, 1).as<float>()[4 * 4 + 1], 3.0f);
  c.set_length(9);
  c.truncate(4);
  EXPECT_EQ(c.length(), 4);
  EXPECT_EQ(c.num_pages(), 1 * 2 + 1);
  EXPECT_THROW(c.set_length(9), Error);
}

TEST(Sampler, LogitBiasMovesTheGreedyChoice) {
  const float logits[] = {1.0f, 3.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.logit_bias = {{1, -100.0f}};  // bans the argmax: the runner-up wins
  EXPECT_EQ(Sampler(p).sample(logits, 4, {}, 0), 2);
  p.logit_bias = {{3, 100.0f}};  // forces the least likely token
  EXPECT_EQ(Sampler(p).sample(logits, 4, {}, 0), 3);
  p.logit_bias = {{1, -1.5f}};  // a small bias is added, not a ban: 3 - 1.5 < 2
  EXPECT_EQ(Sampler(p).sample(logits, 4, {}, 0), 2);
}

TEST(Sampler, LogitBiasBansATokenWhenSampling) {
  const float logits[] = {0.0f, 0.0f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  p.logit_bias = {{0, -100.0f}, {2, -100.0f}};
  Sampler s(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(logits, 3, {}, 0), 1);
}

TEST(Sampler, LogitBiasOutsideItsRangeIsRefused) {
  SamplingParams p;
  p.logit_bias = {{0, 100.5f}};
  EXPECT_THROW(p.validate(), Error);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(p.validate(), Error);
  p.logit_bias = {{0, -100.0f}, {5, 100.0f}};
  EXPECT_NO_THROW(p.validate());
}
