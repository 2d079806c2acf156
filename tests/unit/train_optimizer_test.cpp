// The optimizer side of training (src/train/): AdamW against a scalar float64 transcription of its
// update, the two clip groups, no decay on vectors, the routing bias left to the balance rule, the
// schedules' shapes, and the recipe's key checks.
#include <gtest/gtest.h>

#include <cmath>

#include "m3/error.h"
#include "base/thread_pool.h"
#include "train/moe_balance.h"
#include "train/optimizer.h"
#include "train/recipe.h"
#include "train/schedule.h"
#include "train_gradcheck.h"

namespace {

using namespace m3::train;
using m3::TensorRole;

m3::TextConfig two_layer_config() {
  m3::TextConfig t;
  t.hidden_size = 8;
  t.num_attention_heads = 2;
  t.num_key_value_heads = 1;
  t.head_dim = 4;
  t.rotary_dim = 2;
  t.intermediate_size = 4;
  t.shared_intermediate_size = 4;
  t.n_shared_experts = 1;
  t.dense_intermediate_size = 8;
  t.vocab_size = 11;
  t.num_local_experts = 3;
  t.num_experts_per_tok = 2;
  t.num_hidden_layers = 2;
  t.moe_layer_freq = {0, 1};
  t.sparse.use_sparse_attention = true;
  t.sparse.sparse_attention_freq = {0, 1};
  t.sparse.sparse_disable_index_value = {0, 1};
  t.sparse.sparse_index_dim = 4;
  t.sparse.sparse_num_index_heads = 1;
  t.sparse.sparse_block_size = 2;
  t.sparse.sparse_topk_blocks = 2;
  return t;
}

TEST(TrainOptimizer, AdamWMatchesItsFormulaWithSeparateClipGroups) {
  const ParameterTable table(two_layer_config());
  AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  o.clip = 0.5;
  o.indexer_clip = 2.0;
  AdamW opt(table, o);
  m3::ThreadPool pool(2);
  const auto p0 = m3::test::random_values(size_t(table.total()), 1);
  std::vector<float> params(p0.begin(), p0.end()), first = params;
  std::vector<double> m(params.size(), 0.0), v(params.size(), 0.0), ref(params.begin(), params.end());
  for (int step = 1; step <= 3; ++step) {
    const auto g0 = m3::test::random_values(params.size(), 10 + uint64_t(step));
    std::vector<float> grads(g0.begin(), g0.end());
    double sq[2] = {0, 0};
    for (size_t i = 0; i < table.specs().size(); ++i) {
      const ParamGroup g = param_group(table.specs()[i].role);
      if (g == ParamGroup::Frozen) continue;
      for (int64_t j = 0; j < table.specs()[i].numel(); ++j) sq[g == ParamGroup::Indexer] += g0[size_t(table.offset(i) + j)] * g0[size_t(table.offset(i) + j)];
    }
    const ClipReport rep = opt.step(pool, params, grads, o.lr);
    EXPECT_NEAR(rep.backbone_norm, std::sqrt(sq[0]), 1e-4);
    EXPECT_NEAR(rep.indexer_norm, std::sqrt(sq[1]), 1e-4);
    const double factor[2] = {std::min(1.0, o.clip / std::sqrt(sq[0])), std::min(1.0, o.indexer_clip / std::sqrt(sq[1]))};
    for (size_t i = 0; i < table.specs().size(); ++i) {
      const m3::TensorSpec& s = table.specs()[i];
      const ParamGroup g = param_group(s.role);
      for (int64_t j = 0; j < s.numel(); ++j) {
        const size_t k = size_t(table.offset(i) + j);
        if (g == ParamGroup::Frozen) continue;
        const double gr = g0[k] * factor[g == ParamGroup::Indexer];
        m[k] = 0.9 * m[k] + 0.1 * gr;
        v[k] = 0.95 * v[k] + 0.05 * gr * gr;
        const double mh = m[k] / (1 - std::pow(0.9, step)), vh = v[k] / (1 - std::pow(0.95, step));
        const double decay = s.storage == m3::TensorStorage::Vector ? 0.0 : 0.1;
        ref[k] -= o.lr * (mh / (std::sqrt(vh) + 1e-8) + decay * ref[k]);
      }
    }
  }
  double worst = 0.0;
  for (size_t k = 0; k < params.size(); ++k) worst = std::max(worst, std::fabs(double(params[k]) - ref[k]));
  EXPECT_LT(worst, 1e-5);
  // The routing bias is not the optimizer's: it did not move.
  const int64_t bias = table.at(TensorRole::RoutingBias, 1);
  for (int e = 0; e < 3; ++e) EXPECT_EQ(params[size_t(bias + e)], first[size_t(bias + e)]);
}

TEST(TrainOptimizer, RoutingBiasMovesTowardBalance) {
  const ParameterTable table(two_layer_config());
  std::vector<float> params(size_t(table.total()), 0.0f);
  update_routing_bias(table, {{}, {10, 2, 6}}, 1e-3, params);
  const float* b = params.data() + table.at(TensorRole::RoutingBias, 1);
  EXPECT_FLOAT_EQ(b[0], -1e-3f);  // overloaded: chosen less
  EXPECT_FLOAT_EQ(b[1], 1e-3f);   // underloaded: chosen more
  EXPECT_FLOAT_EQ(b[2], 0.0f);    // at the mean
  EXPECT_DOUBLE_EQ(load_imbalance({10, 2, 6}), 10.0 / 6.0);
}

TEST(TrainOptimizer, Schedules) {
  ScheduleOptions s;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 9), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 10), 1.0);
  EXPECT_NEAR(learning_rate(s, 1.0, 109), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(s, 1.0, 10 + 99 / 2), 0.55, 0.02);  // cosine midpoint
  s.kind = "constant";
  s.cooldown_steps = 20;
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 50), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1.0, 89), 1.0);
  EXPECT_NEAR(learning_rate(s, 1.0, 109), 0.1, 1e-12);
}

TEST(TrainRecipe, KeysAreChecked) {
  const Recipe r = parse_recipe(R"({"model": "m", "steps": 5, "optimizer": {"lr": 0.01}, "out": "o",
                                    "data": {"files": ["a.txt"]}, "msa": {"dense_warmup_steps": 2}})",
                                "r.json");
  EXPECT_EQ(r.steps, 5);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 0.01);
  EXPECT_TRUE(r.dense_at(1));
  EXPECT_FALSE(r.dense_at(2));
  validate_recipe(r);
  auto error_of = [](const std::string& text) {
    try {
      validate_recipe(parse_recipe(text, "r.json"));
    } catch (const m3::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"model": "m", "out": "o", "data": {"files": ["a"]}, "schedul": {}})").find("unknown key 'schedul'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "m", "out": "o", "data": {"files": ["a"], "task": "passkey"}})").find("exactly one"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "m", "out": "o", "data": {"task": "needle"}})").find("passkey"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": "m", "out": "o", "data": {"files": ["a"]}, "batch_size": 1.5})").find("integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "m", "data": {"files": ["a"]}})").find("out"), std::string::npos);
  // Round trip.
  const Recipe back = parse_recipe(recipe_to_json(r), "round trip");
  EXPECT_EQ(back.steps, r.steps);
  EXPECT_EQ(back.files, r.files);
  EXPECT_EQ(back.dense_warmup_steps, 2);
}

}  // namespace
