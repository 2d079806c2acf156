// The prefix cache is exact on a real (tiny, random) model: logits after reusing cached blocks
// equal logits of a cold prefill, bit for bit, both when an entry is taken over (next turn) and
// when its blocks are copied (another conversation sharing a prefix).
#include <gtest/gtest.h>

#include "tiny_model.h"

#include <random>

#include "runtime/engine.h"
#include "runtime/prefill.h"
#include "runtime/prefix_cache.h"

namespace {

using m3::test::TinyModel;

std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

// Logits of every position of `tokens` from an empty cache: (n, vocab).
std::vector<float> cold_logits(m3::TextModel& model, const std::vector<int32_t>& tokens) {
  m3::KvCache cache(model.cache_shape());
  std::vector<float> logits;
  m3::prefill(model, cache, tokens.data(), int64_t(tokens.size()), 512, m3::LogitsFor::All, logits);
  return logits;
}

}  // namespace

TEST(ServerPrefixCacheModel, ReuseGivesTheSameLogitsAsAColdPrefill) {
  TinyModel tiny("server_prefix_cache", 1);
  m3::TextModel& model = tiny.engine->model();
  const int V = model.vocab_size();
  const int B = model.cache_shape().block_size;
  const int tok_vocab = tiny.engine->tokenizer().vocab_size();
  const std::vector<int32_t> a = random_tokens(size_t(6 * B + 5), tok_vocab, 7);

  m3::PrefixCache pc(model.cache_shape(), 256u << 20);
  // Turn 1: prefill the first 4 blocks + 3 tokens, then decode 2 tokens one at a time.
  const size_t turn1 = size_t(4 * B + 3);
  auto lease = pc.acquire(std::vector<int32_t>(a.begin(), a.begin() + turn1));
  ASSERT_EQ(lease.reused, 0);
  std::vector<float> logits;
  m3::prefill(model, *lease.cache, a.data(), int64_t(turn1), 16, m3::LogitsFor::Last, logits);
  for (size_t i = turn1; i < turn1 + 2; ++i) model.forward(*lease.cache, &a[i], 1, m3::LogitsFor::Last, logits);
  pc.release(std::move(lease.cache), std::vector<int32_t>(a.begin(), a.begin() + turn1 + 2));

  // Turn 2 extends turn 1: every cached position reused (the cut is inside a block), the entry
  // taken over.
  const std::vector<float> cold = cold_logits(model, a);
  auto warm = pc.acquire(a);
  ASSERT_EQ(warm.reused, 4 * B + 5);
  EXPECT_EQ(pc.entries(), 0u);
  m3::prefill(model, *warm.cache, a.data() + warm.reused, int64_t(a.size()) - warm.reused, 512, m3::LogitsFor::All, logits);
  ASSERT_EQ(logits.size(), (a.size() - size_t(warm.reused)) * size_t(V));
  for (size_t i = 0; i < logits.size(); ++i)
    ASSERT_EQ(logits[i], cold[size_t(warm.reused) * size_t(V) + i]) << "row " << i / size_t(V) << " col " << i % size_t(V);
  pc.release(std::move(warm.cache), a);

  // Another sequence sharing 2 blocks + 5 tokens: those positions copied, the long entry kept.
  std::vector<int32_t> b(a.begin(), a.begin() + 2 * B + 5);
  const auto tail = random_tokens(size_t(B + 3), tok_vocab, 8);
  b.insert(b.end(), tail.begin(), tail.end());
  const std::vector<float> cold_b = cold_logits(model, b);
  auto shared = pc.acquire(b);
  ASSERT_EQ(shared.reused, 2 * B + 5);
  EXPECT_EQ(pc.entries(), 1u);
  m3::prefill(model, *shared.cache, b.data() + shared.reused, int64_t(b.size()) - shared.reused, 7, m3::LogitsFor::All, logits);
  for (size_t i = 0; i < logits.size(); ++i)
    ASSERT_EQ(logits[i], cold_b[size_t(shared.reused) * size_t(V) + i]) << "row " << i / size_t(V);
}
