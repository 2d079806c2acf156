// The whole training model (src/train/train_model.h): its gradients against float64 central
// differences for every tensor, in the dense warm-up and in the sparse stage (selection active);
// float against double; bits independent of the thread count; and its forward against the
// inference engine's logits on a real checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "io/safetensors.h"
#include "runtime/engine.h"
#include "tiny_model.h"
#include "train/train_model.h"
#include "train_gradcheck.h"

namespace {

using namespace m3::train;
using m3::TensorRole;
using m3::test::dot;
using m3::test::random_values;

// Three layers (dense, then two MSA + MoE), block 4 and top-2: tokens from 8 on select sparsely.
m3::ModelConfig small_config() {
  m3::ModelConfig c;
  m3::TextConfig& t = c.text;
  t.hidden_size = 16;
  t.num_attention_heads = 4;
  t.num_key_value_heads = 2;
  t.head_dim = 8;
  t.rotary_dim = 4;
  t.intermediate_size = 8;
  t.shared_intermediate_size = 8;
  t.n_shared_experts = 1;
  t.dense_intermediate_size = 24;
  t.vocab_size = 23;
  t.max_position_embeddings = 1 << 20;
  t.rope_theta = 5e6;
  t.num_local_experts = 4;
  t.num_experts_per_tok = 2;
  t.routed_scaling_factor = 2.0;
  t.num_hidden_layers = 3;
  t.moe_layer_freq = {0, 1, 1};
  t.sparse.use_sparse_attention = true;
  t.sparse.sparse_attention_freq = {0, 1, 1};
  t.sparse.sparse_disable_index_value = {0, 1, 1};
  t.sparse.sparse_index_dim = 8;
  t.sparse.sparse_num_index_heads = 2;
  t.sparse.sparse_block_size = 4;
  t.sparse.sparse_topk_blocks = 2;
  return c;
}

bool is_indexer(TensorRole r) {
  return r == TensorRole::IndexQProj || r == TensorRole::IndexKProj || r == TensorRole::IndexQNorm ||
         r == TensorRole::IndexKNorm;
}

template <typename T>
void randomize(TrainModel<T>& m, uint64_t seed) {
  const auto v = random_values(m.params.size(), seed, -0.6, 0.6);
  for (size_t i = 0; i < v.size(); ++i) m.params[i] = T(v[i]);
  for (size_t i = 0; i < m.table().specs().size(); ++i)
    if (m.table().specs()[i].role == TensorRole::RoutingBias)
      for (int64_t j = 0; j < m.table().specs()[i].numel(); ++j) m.params[size_t(m.table().offset(i) + j)] *= T(0.1);
}

struct Batch {
  int64_t batch = 2, seq = 18;
  std::vector<int32_t> tokens, targets;
  explicit Batch(int vocab) {
    std::mt19937 rng(7);
    for (int64_t i = 0; i < batch * seq; ++i) tokens.push_back(int32_t(rng() % uint32_t(vocab)));
    for (int64_t i = 0; i < batch * seq; ++i) targets.push_back(i % seq == seq - 1 ? -1 : tokens[size_t(i + 1)]);
  }
};

class ModelGradient : public testing::TestWithParam<bool> {};

TEST_P(ModelGradient, EveryTensorMatchesFiniteDifferences) {
  const bool warmup = GetParam();
  m3::ThreadPool pool(2);
  TrainModel<double> m(small_config(), pool);
  randomize(m, 3);
  const Batch b(m.config().vocab_size);
  StepOptions opt;
  opt.indexer_warmup = warmup;
  Decisions decisions;
  m.grads.assign(m.params.size(), 0.0);
  const StepStats st = m.forward_backward(b.tokens.data(), b.targets.data(), b.batch, b.seq, opt, &decisions);
  EXPECT_GT(st.ce, 0.0);
  EXPECT_GT(st.kl, 0.0);
  EXPECT_EQ(st.targets, b.batch * (b.seq - 1));
  // Sparse selection is active: some rows chose fewer blocks than they can see.
  EXPECT_EQ(decisions.blocks[1][0].count_of(0, 17), 2);

  StepOptions eval = opt;
  eval.backward = false;
  auto losses = [&] {
    return m.forward_backward(b.tokens.data(), b.targets.data(), b.batch, b.seq, eval, &decisions, true);
  };
  const auto& specs = m.table().specs();
  int checked = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].role == TensorRole::RoutingBias) continue;  // selection only: no gradient
    const int64_t off = m.table().offset(i), n = specs[i].numel();
    const auto u = random_values(size_t(n), 100 + i);
    const std::vector<double> grad(m.grads.begin() + off, m.grads.begin() + off + n);
    const double analytic = dot(grad, u);
    const double h = 1e-5;
    auto at = [&](double step) {
      for (int64_t j = 0; j < n; ++j) m.params[size_t(off + j)] += step * u[size_t(j)];
      const StepStats s = losses();
      for (int64_t j = 0; j < n; ++j) m.params[size_t(off + j)] -= step * u[size_t(j)];
      return is_indexer(specs[i].role) ? s.kl : s.ce;  // the indexer learns from the KL alone
    };
    const double fd = (at(h) - at(-h)) / (2 * h);
    EXPECT_NEAR(analytic, fd, 1e-6 * std::max(1.0, std::fabs(fd))) << specs[i].name;
    const bool idle_expert = specs[i].expert >= 0 && st.expert_load[size_t(specs[i].layer)][size_t(specs[i].expert)] == 0;
    if (!idle_expert) {
      EXPECT_NE(analytic, 0.0) << specs[i].name;
    }
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

INSTANTIATE_TEST_SUITE_P(Stages, ModelGradient, testing::Bool(),
                         [](const auto& info) { return info.param ? "DenseWarmup" : "SparseStage"; });

TEST(TrainModel, FloatGradientsMatchDouble) {
  m3::ThreadPool pool(2);
  TrainModel<double> md(small_config(), pool);
  TrainModel<float> mf(small_config(), pool);
  randomize(md, 5);
  randomize(mf, 5);
  const Batch b(md.config().vocab_size);
  md.grads.assign(md.params.size(), 0.0);
  mf.grads.assign(mf.params.size(), 0.0f);
  Decisions dd;
  const StepStats sd = md.forward_backward(b.tokens.data(), b.targets.data(), b.batch, b.seq, {}, &dd);
  const StepStats sf = mf.forward_backward(b.tokens.data(), b.targets.data(), b.batch, b.seq, {}, &dd, true);
  EXPECT_NEAR(sf.ce, sd.ce, 1e-5 * sd.ce);
  EXPECT_NEAR(sf.kl, sd.kl, 1e-4 * sd.kl);
  for (size_t i = 0; i < md.table().specs().size(); ++i) {
    const int64_t off = md.table().offset(i), n = md.table().specs()[i].numel();
    double diff = 0.0, norm = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double d = md.grads[size_t(off + j)];
      diff += (double(mf.grads[size_t(off + j)]) - d) * (double(mf.grads[size_t(off + j)]) - d);
      norm += d * d;
    }
    if (norm == 0.0) continue;
    EXPECT_LT(std::sqrt(diff / norm), 1e-4) << md.table().specs()[i].name;
  }
}

TEST(TrainModel, GradientBitsDoNotDependOnTheThreadCount) {
  std::vector<std::vector<float>> grads;
  for (int threads : {1, 2, 3}) {
    m3::ThreadPool pool(threads);
    TrainModel<float> m(small_config(), pool);
    randomize(m, 6);
    const Batch b(m.config().vocab_size);
    m.grads.assign(m.params.size(), 0.0f);
    m.forward_backward(b.tokens.data(), b.targets.data(), b.batch, b.seq, {});
    grads.push_back(m.grads);
  }
  for (size_t t = 1; t < grads.size(); ++t)
    EXPECT_EQ(std::memcmp(grads[0].data(), grads[t].data(), grads[0].size() * sizeof(float)), 0) << "threads run " << t;
}

// The training forward is the model the engine serves: on a random tiny checkpoint with selection
// active (block 16, top-4, 100 tokens), its cross-entropy equals the one of the engine's logits.
TEST(TrainModel, ForwardMatchesTheInferenceEngine) {
  m3::test::TinyModel tiny("train_forward", 11);
  const m3::ModelConfig& cfg = tiny.engine->config();
  m3::ThreadPool pool(2);
  TrainModel<float> m(cfg, pool);
  m.params = load_parameters<float>(tiny.engine->store(), cfg, m.table());
  const int64_t T = 100;
  std::vector<int32_t> tokens, targets;
  std::mt19937 rng(12);
  for (int64_t i = 0; i < T; ++i) tokens.push_back(int32_t(rng() % uint32_t(cfg.text.vocab_size)));
  for (int64_t i = 0; i < T; ++i) targets.push_back(i + 1 < T ? tokens[size_t(i + 1)] : -1);
  StepOptions eval;
  eval.backward = false;
  const StepStats st = m.forward_backward(tokens.data(), targets.data(), 1, T, eval);

  m3::KvCache cache(tiny.engine->model().cache_shape());  // f32 pages
  std::vector<float> logits;
  tiny.engine->model().forward(cache, tokens.data(), T, m3::LogitsFor::All, logits);
  const int64_t V = cfg.text.vocab_size;
  double ce = 0.0;
  for (int64_t i = 0; i + 1 < T; ++i) {
    const float* z = logits.data() + i * V;
    double mx = z[0], s = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(z[j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(double(z[j]) - mx);
    ce += mx + std::log(s) - double(z[targets[size_t(i)]]);
  }
  ce /= double(T - 1);
  EXPECT_NEAR(st.ce, ce, 1e-5 * ce);
}

}  // namespace
