// A Session with a thinking budget on a real (tiny, random) model: at the cap the closer is fed
// to the model in place of a sampled token, reported through on_token, and the rest of the reply
// continues from it exactly as if the prompt had contained it. KV truncation at a length inside
// a block (what `m3 chat` does between turns) is exact too.
#include <gtest/gtest.h>

#include "tiny_model.h"


#include "m3/chat/thinking_budget.h"
#include "runtime/engine.h"
#include "runtime/prefill.h"
#include "m3/session.h"

namespace {

using m3::test::TinyModel;

// Greedy tokens after `prompt` (end-of-turn does not stop); `cap` set: the prompt opened a thought
// and reasoning is capped (nullopt inside: only counted).
std::vector<int32_t> greedy(m3::Engine& e, const std::vector<int32_t>& prompt, int n,
                            std::optional<std::optional<int64_t>> cap, m3::SessionStats* stats = nullptr) {
  m3::Session session(e, m3::SessionOptions{});
  m3::Prompt p;
  p.append_tokens(prompt);
  m3::GenerationConfig g;
  g.max_tokens = n;
  g.sampling.temperature = 0.0f;
  g.sample_vocab = e.tokenizer().vocab_size();
  g.stop_at_end_of_turn = false;
  if (cap) g.reasoning = m3::ReasoningOptions{/*prompt_opened=*/true, /*may_open=*/false, *cap};
  std::vector<int32_t> out;
  m3::SessionCallbacks cb;
  cb.on_token = [&](const m3::TokenEvent& ev) {
    out.push_back(ev.id);
    return true;
  };
  const m3::SessionStats st = session.generate(p, g, cb);
  EXPECT_EQ(st.generated, out);
  if (stats) *stats = st;
  return out;
}

TEST(GenerateThinkingBudget, ClosesTheThoughtAtTheCap) {
  TinyModel tiny("generate_budget", 3);
  m3::Engine& e = *tiny.engine;
  const auto markers = m3::chat::ThinkingMarkers::from_tokenizer(e.tokenizer());
  // A prompt that ends inside an opened thought, like thinking_mode=enabled.
  std::vector<int32_t> prompt = e.tokenizer().encode("]~b]user\nhello there[e~[\n]~b]ai\n", true);
  prompt.push_back(markers.open);

  const int cap = 5, n = 12;
  const std::vector<int32_t> free_run = greedy(e, prompt, n, std::nullopt);
  ASSERT_EQ(free_run.size(), size_t(n));
  for (int i = 0; i < cap; ++i) ASSERT_NE(free_run[size_t(i)], markers.close) << "model closed the thought itself";

  m3::SessionStats st;
  const std::vector<int32_t> capped = greedy(e, prompt, n, std::optional<int64_t>(cap), &st);
  ASSERT_EQ(capped.size(), size_t(n));
  // The first `cap` tokens are what the model picks anyway; then the forced closer.
  EXPECT_EQ(std::vector<int32_t>(capped.begin(), capped.begin() + cap),
            std::vector<int32_t>(free_run.begin(), free_run.begin() + cap));
  EXPECT_EQ(capped[size_t(cap)], markers.close);
  EXPECT_EQ(st.forced_tokens, 1);
  EXPECT_EQ(st.generated_tokens, n);
  EXPECT_EQ(st.reasoning_tokens, cap);

  // The answer continues from the closer: the same tokens as a prompt that already holds it.
  std::vector<int32_t> forced_prompt = prompt;
  forced_prompt.insert(forced_prompt.end(), capped.begin(), capped.begin() + cap + 1);
  const std::vector<int32_t> answer = greedy(e, forced_prompt, n - cap - 1, std::nullopt);
  EXPECT_EQ(answer, std::vector<int32_t>(capped.begin() + cap + 1, capped.end()));
}

TEST(GenerateThinkingBudget, UncappedBudgetChangesNothing) {
  TinyModel tiny("generate_budget", 3);
  m3::Engine& e = *tiny.engine;
  const auto markers = m3::chat::ThinkingMarkers::from_tokenizer(e.tokenizer());
  std::vector<int32_t> prompt = e.tokenizer().encode("]~b]user\nhi[e~[\n]~b]ai\n", true);
  prompt.push_back(markers.open);
  // Without a cap the budget only counts: the tokens are the plain greedy ones.
  m3::SessionStats st;
  EXPECT_EQ(greedy(e, prompt, 8, std::optional<int64_t>(std::nullopt), &st), greedy(e, prompt, 8, std::nullopt));
  EXPECT_EQ(st.forced_tokens, 0);
}

TEST(KvCacheTruncate, InsideABlockIsExact) {
  TinyModel tiny("generate_budget", 3);
  m3::TextModel& model = tiny.engine->model();
  const int B = model.cache_shape().block_size;
  const int vocab = tiny.engine->tokenizer().vocab_size();
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
