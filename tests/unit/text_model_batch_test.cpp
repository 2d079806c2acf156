// Continuous batching is exact: several sequences stacked in one forward pass (decode rows, prefill
// chunks and embeddings mixed, each against its own cache) give bit for bit the logits each gets
// when run alone, on a real (tiny, random, MSA) model, with 1 and 2 threads.
#include <gtest/gtest.h>

#include "tiny_model.h"

#include <random>

#include "m3/error.h"
#include "runtime/engine.h"
#include "runtime/prefill.h"

namespace {

using m3::test::TinyModel;

std::vector<int32_t> random_tokens(size_t n, int vocab, std::mt19937_64& rng) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

void expect_same(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += a[i] != b[i];
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << a.size() << " logits differ";
}

void check_batching_is_exact(int threads) {
  TinyModel tiny("text_model_batch", 3, threads);
  m3::TextModel& model = tiny.engine->model();
  const int vocab = tiny.engine->tokenizer().vocab_size();
  const int B = model.cache_shape().block_size;
  std::mt19937_64 rng(11);

  // Four sequences with histories of different lengths (inside blocks, on a boundary, past the
  // top-k window so MSA really selects), each then fed a different amount in one batched step.
  const std::vector<int64_t> history = {int64_t(B) * 9 + 5, int64_t(B) * 4, 7, int64_t(B) * 12 + 1};
  const std::vector<int64_t> step = {1, 1, int64_t(B) + 3, 2};
  const std::vector<m3::LogitsFor> which = {m3::LogitsFor::Last, m3::LogitsFor::Last, m3::LogitsFor::All,
                                            m3::LogitsFor::Last};
  const size_t S = history.size();

  std::vector<std::vector<int32_t>> hist(S), next(S);
  std::vector<std::unique_ptr<m3::KvCache>> alone(S), batched(S);
  std::vector<float> scratch;
  for (size_t s = 0; s < S; ++s) {
    hist[s] = random_tokens(size_t(history[s]), vocab, rng);
    next[s] = random_tokens(size_t(step[s]), vocab, rng);
    alone[s] = std::make_unique<m3::KvCache>(model.cache_shape());
    batched[s] = std::make_unique<m3::KvCache>(model.cache_shape());
    m3::prefill(model, *alone[s], hist[s].data(), history[s], 64, m3::LogitsFor::None, scratch);
    m3::prefill(model, *batched[s], hist[s].data(), history[s], 64, m3::LogitsFor::None, scratch);
  }

  std::vector<std::vector<float>> want(S), got(S);
  for (size_t s = 0; s < S; ++s) model.forward(*alone[s], next[s].data(), step[s], which[s], want[s]);

  // Sequence 1 goes in as input embeddings (the multimodal path).
  std::vector<float> emb(size_t(step[1]) * size_t(model.config().hidden_size));
  model.embed(next[1].data(), step[1], emb.data());
  std::vector<m3::BatchInput> inputs;
  for (size_t s = 0; s < S; ++s) {
    m3::BatchInput in;
    in.cache = batched[s].get();
    in.n = step[s];
    in.which = which[s];
    in.logits = &got[s];
    if (s == 1) in.embeddings = emb.data();
    else in.tokens = next[s].data();
    inputs.push_back(in);
  }
  model.forward_batch(inputs);

  for (size_t s = 0; s < S; ++s) {
    EXPECT_EQ(batched[s]->length(), history[s] + step[s]);
    expect_same(got[s], want[s], "sequence " + std::to_string(s) + " step");
  }

  // A second batched step (everyone decodes one token) still matches: the batched caches hold the
  // same K/V as the single-sequence ones.
  for (size_t s = 0; s < S; ++s) {
    const int32_t t = int32_t(rng() % uint64_t(vocab));
    next[s] = {t};
    model.forward(*alone[s], next[s].data(), 1, m3::LogitsFor::Last, want[s]);
  }
  inputs.clear();
  for (size_t s = 0; s < S; ++s) inputs.push_back(m3::BatchInput{batched[s].get(), next[s].data(), nullptr, 1,
                                                                 m3::LogitsFor::Last, &got[s]});
  model.forward_batch(inputs);
  for (size_t s = 0; s < S; ++s) expect_same(got[s], want[s], "sequence " + std::to_string(s) + " decode");
}

}  // namespace

TEST(TextModelBatch, BatchedSequencesMatchSingleRunsOneThread) { check_batching_is_exact(1); }
TEST(TextModelBatch, BatchedSequencesMatchSingleRunsTwoThreads) { check_batching_is_exact(2); }

TEST(TextModelBatch, RejectsBadBatches) {
  TinyModel tiny("text_model_batch", 3);
  m3::TextModel& model = tiny.engine->model();
  m3::KvCache cache(model.cache_shape());
  const int32_t ids[2] = {1, 2};
  std::vector<float> logits;
  // Two entries writing into one cache would interleave their positions.
  EXPECT_THROW(model.forward_batch({m3::BatchInput{&cache, ids, nullptr, 1, m3::LogitsFor::Last, &logits},
                                    m3::BatchInput{&cache, ids + 1, nullptr, 1, m3::LogitsFor::Last, &logits}}),
               m3::Error);
  EXPECT_THROW(model.forward_batch({m3::BatchInput{&cache, nullptr, nullptr, 1, m3::LogitsFor::Last, &logits}}), m3::Error);
  EXPECT_THROW(model.forward_batch({}), m3::Error);
  EXPECT_EQ(cache.length(), 0);
}

TEST(TextModelWorkspace, PassesReuseTheCallersBuffersAndKeepTheBits) {
  TinyModel tiny("text_model_ws", 4);
  m3::TextModel& model = tiny.engine->model();
  const int vocab = tiny.engine->tokenizer().vocab_size();
  std::mt19937_64 rng(12);
  const std::vector<int32_t> prompt = random_tokens(200, vocab, rng);
  m3::Workspace ws;
  m3::KvCache a(model.cache_shape()), b(model.cache_shape());
  std::vector<float> with_ws, plain;
  model.forward_batch({m3::BatchInput{&a, prompt.data(), nullptr, 100, m3::LogitsFor::All, &with_ws}}, ws);
  const size_t grown = ws.bytes();
  EXPECT_GT(grown, 0u);
  // Smaller passes (decode steps) allocate nothing new.
  model.forward_batch({m3::BatchInput{&a, prompt.data() + 100, nullptr, 1, m3::LogitsFor::Last, &with_ws}}, ws);
  EXPECT_EQ(ws.bytes(), grown);
  model.forward_batch({m3::BatchInput{&a, prompt.data() + 101, nullptr, 99, m3::LogitsFor::All, &with_ws}}, ws);
  // The same tokens through the model's own workspace give the same bits.
  model.forward(b, prompt.data(), 101, m3::LogitsFor::None, plain);
  model.forward(b, prompt.data() + 101, 99, m3::LogitsFor::All, plain);
  expect_same(with_ws, plain, "workspace vs own");
}
