// The expert seam (model/moe.h): running the routed experts in disjoint sets, in any order, into
// separate slot buffers (as processes that own a share of the experts would) and combining gives
// the bits of running all of them in one moe_forward; on a real (tiny, random) checkpoint's MoE layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "m3/error.h"
#include "kernels/rope.h"
#include "model/moe.h"
#include "tiny_model.h"

namespace {

using m3::test::TinyModel;

struct Layer {
  TinyModel tiny{"moe_seam", 9, 2};
  const m3::TextConfig& cfg = tiny.engine->model().config();
  m3::TextWeights weights = m3::bind_text_weights(tiny.engine->store(), cfg);
  m3::RopeTable rope{cfg.rope_theta, cfg.rotary_dim};
  std::vector<m3::SequenceRun> runs;

  const m3::MoeWeights& moe() const {
    for (const auto& l : weights.layers)
      if (l.is_moe) return l.moe;
    throw std::runtime_error("no MoE layer");
  }
  m3::Workspace ws;
  m3::ForwardContext context(int64_t rows) { return m3::ForwardContext{tiny.engine->pool(), cfg, rope, runs, rows, ws}; }
};

std::vector<float> random_rows(int64_t rows, int64_t hidden, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(size_t(rows * hidden));
  for (auto& v : x) v = float(int64_t(rng() % 2001) - 1000) / 500.0f;
  return x;
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << a.size() << " values differ";
}

TEST(MoeSeam, DisjointExpertSetsCombineToTheSameBits) {
  Layer layer;
  const int E = layer.cfg.num_local_experts;
  const int64_t H = layer.cfg.hidden_size;
  for (int64_t rows : {1, 7, 64}) {
    const m3::ForwardContext ctx = layer.context(rows);
    const std::vector<float> x = random_rows(rows, H, 100 + uint64_t(rows));
    std::vector<float> whole(size_t(rows * H));
    m3::moe_forward(ctx, layer.moe(), x.data(), whole.data());

    const m3::MoeRouting routing = m3::moe_route_rows(ctx, layer.moe(), x.data());
    const m3::MoeDispatch dispatch = m3::moe_dispatch(routing, E);
    std::vector<float> shared(size_t(rows * H));
    m3::mlp_forward(ctx, layer.moe().shared, x.data(), shared.data());

    std::mt19937_64 rng{uint64_t(rows)};
    for (int trial = 0; trial < 4; ++trial) {
      // A random owner per expert among `parts` processes; each runs its experts in a random order
      // into a buffer of its own.
      const int parts = 2 + trial % 3;
      std::vector<std::vector<int32_t>> owned(static_cast<size_t>(parts));
      for (int e = 0; e < E; ++e) owned[rng() % uint64_t(parts)].push_back(e);
      std::vector<std::vector<float>> buffers(size_t(parts), std::vector<float>(size_t(rows * routing.top_k * H), NAN));
      for (int p = 0; p < parts; ++p) {
        std::shuffle(owned[size_t(p)].begin(), owned[size_t(p)].end(), rng);
        m3::moe_run_experts(ctx, layer.moe(), x.data(), dispatch, owned[size_t(p)], buffers[size_t(p)].data());
      }
      // Gather: every slot from the process that owns its expert.
      std::vector<float> slots(size_t(rows * routing.top_k * H), NAN);
      for (int p = 0; p < parts; ++p)
        for (int32_t e : owned[size_t(p)])
          for (int64_t i = dispatch.offsets[size_t(e)]; i < dispatch.offsets[size_t(e) + 1]; ++i) {
            const int64_t s = dispatch.slots[size_t(i)];
            std::copy_n(buffers[size_t(p)].data() + s * H, H, slots.data() + s * H);
          }
      std::vector<float> combined(size_t(rows * H));
      m3::moe_combine(routing, shared.data(), slots.data(), H, combined.data());
      expect_bits(combined, whole, std::to_string(rows) + " rows, " + std::to_string(parts) + " parts");
    }
  }
}

TEST(MoeSeam, DispatchListsEveryChoiceOnceInRowOrder) {
  m3::MoeRouting r;
  r.rows = 3;
  r.top_k = 2;
  r.expert = {2, 0, 0, 1, 2, 1};
  r.weight = {1, 1, 1, 1, 1, 1};
  const m3::MoeDispatch d = m3::moe_dispatch(r, 4);
  EXPECT_EQ(d.offsets, (std::vector<int64_t>{0, 2, 4, 6, 6}));
  EXPECT_EQ(d.rows, (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(d.slots, (std::vector<int32_t>{1, 2, 3, 5, 0, 4}));
  EXPECT_EQ(d.count(3), 0);
  r.expert[0] = 4;
  EXPECT_THROW(m3::moe_dispatch(r, 4), m3::Error);
}

TEST(MoeSeam, CombineAddsSlotsInExpertOrder) {
  // Row 0 chose experts 5 then 1: 1's slot is added first. With values where the order shows in
  // fp32 (1 + 1e8 - 1e8 = 0 but 1e8 - 1e8 + 1 = 1), the result tells the order.
  m3::MoeRouting r;
  r.rows = 1;
  r.top_k = 2;
  r.expert = {5, 1};
  r.weight = {1.0f, 1.0f};
  const std::vector<float> shared = {1e8f};
  const std::vector<float> slots = {1.0f, -1e8f};  // slot 0 (expert 5), slot 1 (expert 1)
  std::vector<float> out(1);
  m3::moe_combine(r, shared.data(), slots.data(), 1, out.data());
  EXPECT_EQ(out[0], 1.0f);  // (1e8 + -1e8) + 1, expert 1 before expert 5
  m3::moe_combine(r, nullptr, slots.data(), 1, out.data());
  EXPECT_EQ(out[0], -1e8f + 1.0f);
}

}  // namespace
