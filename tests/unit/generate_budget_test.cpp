// generate() with a thinking budget on a real (tiny, random) model: at the cap the closer is fed
// to the model in place of a sampled token, reported through on_token, and the rest of the reply
// continues from it exactly as if the prompt had contained it. KV truncation at a length inside
// a block (what `m3 chat` does between turns) is exact too.
#include <gtest/gtest.h>

#include "tiny_model.h"


#include "chat/thinking_budget.h"
#include "runtime/engine.h"
#include "runtime/generate.h"

namespace {

using m3::test::TinyModel;

std::vector<int32_t> greedy(m3::Engine& e, const std::vector<int32_t>& prompt, int n,
                            m3::chat::ThinkingBudget* budget, m3::GenerateStats* stats = nullptr) {
  m3::KvCache cache(e.model->cache_shape());
  m3::GenerateOptions opt;
  opt.max_new_tokens = n;
  opt.sampling.temperature = 0.0f;
  opt.sample_vocab = e.tokenizer->vocab_size();
  opt.thinking_budget = budget;
  std::vector<int32_t> out;
  const auto st = m3::generate(*e.model, cache, prompt, opt, [&](int32_t id) {
    out.push_back(id);
    return true;
  });
  if (stats) *stats = st;
  return out;
}

TEST(GenerateThinkingBudget, ClosesTheThoughtAtTheCap) {
  TinyModel tiny("generate_budget", 3);
  m3::Engine& e = *tiny.engine;
  const auto markers = m3::chat::ThinkingMarkers::from_tokenizer(*e.tokenizer);
  // A prompt that ends inside an opened thought, like thinking_mode=enabled.
  std::vector<int32_t> prompt = e.tokenizer->encode("]~b]user\nhello there[e~[\n]~b]ai\n", true);
  prompt.push_back(markers.open);

  const int cap = 5, n = 12;
  const std::vector<int32_t> free_run = greedy(e, prompt, n, nullptr);
  ASSERT_EQ(free_run.size(), size_t(n));
  for (int i = 0; i < cap; ++i) ASSERT_NE(free_run[size_t(i)], markers.close) << "model closed the thought itself";

  m3::chat::ThinkingBudget budget(markers, cap, /*prompt_opened=*/true);
  m3::GenerateStats st;
  const std::vector<int32_t> capped = greedy(e, prompt, n, &budget, &st);
  ASSERT_EQ(capped.size(), size_t(n));
  // The first `cap` tokens are what the model picks anyway; then the forced closer.
  EXPECT_EQ(std::vector<int32_t>(capped.begin(), capped.begin() + cap),
            std::vector<int32_t>(free_run.begin(), free_run.begin() + cap));
  EXPECT_EQ(capped[size_t(cap)], markers.close);
  EXPECT_EQ(st.forced_tokens, 1);
  EXPECT_EQ(st.generated_tokens, n);
  EXPECT_EQ(budget.reasoning_tokens(), cap);
  EXPECT_TRUE(budget.capped());

  // The answer continues from the closer: the same tokens as a prompt that already holds it.
  std::vector<int32_t> forced_prompt = prompt;
  forced_prompt.insert(forced_prompt.end(), capped.begin(), capped.begin() + cap + 1);
  const std::vector<int32_t> answer = greedy(e, forced_prompt, n - cap - 1, nullptr);
  EXPECT_EQ(answer, std::vector<int32_t>(capped.begin() + cap + 1, capped.end()));
}

TEST(GenerateThinkingBudget, UncappedBudgetChangesNothing) {
  TinyModel tiny("generate_budget", 3);
  m3::Engine& e = *tiny.engine;
  const auto markers = m3::chat::ThinkingMarkers::from_tokenizer(*e.tokenizer);
  std::vector<int32_t> prompt = e.tokenizer->encode("]~b]user\nhi[e~[\n]~b]ai\n", true);
  prompt.push_back(markers.open);
  // Without a cap the budget only counts: the tokens are the plain greedy ones.
  m3::chat::ThinkingBudget budget(markers, std::nullopt, /*prompt_opened=*/true);
  m3::GenerateStats st;
  EXPECT_EQ(greedy(e, prompt, 8, &budget, &st), greedy(e, prompt, 8, nullptr));
  EXPECT_EQ(st.forced_tokens, 0);
}

TEST(KvCacheTruncate, InsideABlockIsExact) {
  TinyModel tiny("generate_budget", 3);
  m3::TextModel& model = *tiny.engine->model;
  const int B = model.cache_shape().block_size;
  const int vocab = tiny.engine->tokenizer->vocab_size();
  // Enough blocks that MSA selects sparsely (tiny: block 16, top-4).
  std::vector<int32_t> a, b;
  for (int i = 0; i < 7 * B + 9; ++i) a.push_back(int32_t((i * 37 + 11) % vocab));
  b = a;
  const size_t common = size_t(5 * B + 3);  // not a block boundary
  for (size_t i = common; i < b.size(); ++i) b[i] = int32_t((i * 53 + 5) % vocab);

  std::vector<float> cold, warm;
  {
    m3::KvCache cache(model.cache_shape());
    m3::prefill(model, cache, b.data(), int64_t(common), 512, m3::LogitsFor::None, cold);
    m3::prefill(model, cache, b.data() + common, int64_t(b.size() - common), 512, m3::LogitsFor::All, cold);
  }
  {
    m3::KvCache cache(model.cache_shape());
    m3::prefill(model, cache, a.data(), int64_t(common), 512, m3::LogitsFor::None, warm);
    m3::prefill(model, cache, a.data() + common, int64_t(a.size() - common), 512, m3::LogitsFor::None, warm);
    cache.truncate(int64_t(common));
    ASSERT_EQ(cache.length(), int64_t(common));
    m3::prefill(model, cache, b.data() + common, int64_t(b.size() - common), 512, m3::LogitsFor::All, warm);
  }
  ASSERT_EQ(cold.size(), warm.size());
  for (size_t i = 0; i < cold.size(); ++i) ASSERT_EQ(cold[i], warm[i]) << "at " << i;
}

}  // namespace
