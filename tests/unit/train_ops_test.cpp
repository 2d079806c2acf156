// Every training op's backward against float64 central differences of its forward, at awkward
// sizes (src/train/train_ops.h, attention_train.h, moe_train.h); and the float path (the engine's
// matmul kernels) against the double one.
#include <gtest/gtest.h>

#include <numeric>

#include "base/thread_pool.h"
#include "train/attention_train.h"
#include "train/moe_train.h"
#include "train/train_ops.h"
#include "train_gradcheck.h"

namespace {

using namespace m3::train;
using m3::test::dot;
using m3::test::fd_relative_error;
using m3::test::random_values;

constexpr double kTol = 1e-6;  // central differences at h = 1e-6 in float64: ~1e-9 on smooth ops

m3::ThreadPool& pool() {
  static m3::ThreadPool p(2);
  return p;
}

TEST(TrainOps, RmsNormBackward) {
  const int64_t rows = 3, n = 7;
  auto x = random_values(size_t(rows * n), 1), w = random_values(static_cast<size_t>(n), 2, -0.5, 0.5);
  const auto r = random_values(size_t(rows * n), 3);
  auto objective = [&] {
    std::vector<double> y(x.size()), inv(static_cast<size_t>(rows));
    rmsnorm_forward(x.data(), w.data(), rows, n, 1e-6, y.data(), inv.data());
    return dot(r, y);
  };
  std::vector<double> y(x.size()), inv(static_cast<size_t>(rows)), dx(x.size()), dw(static_cast<size_t>(n), 0.0);
  rmsnorm_forward(x.data(), w.data(), rows, n, 1e-6, y.data(), inv.data());
  rmsnorm_backward(x.data(), w.data(), inv.data(), r.data(), rows, n, dx.data(), dw.data());
  EXPECT_LT(fd_relative_error(x, dx, objective), kTol);
  EXPECT_LT(fd_relative_error(w, dw, objective), kTol);
}

TEST(TrainOps, PartialRopeBackwardIsTheInverseRotation) {
  const int64_t rows = 4;
  const int heads = 2, dim = 10;
  std::vector<int64_t> pos = {0, 5, 77, 123456};
  const RopeAngles<double> angles(5e6, 6, pos.data(), rows);
  auto x = random_values(size_t(rows * heads * dim), 4);
  const auto r = random_values(x.size(), 5);
  auto objective = [&] {
    std::vector<double> y = x;
    rope_rotate(angles, y.data(), rows, heads, dim, false);
    return dot(r, y);
  };
  std::vector<double> dx = r;
  rope_rotate(angles, dx.data(), rows, heads, dim, true);
  EXPECT_LT(fd_relative_error(x, dx, objective), kTol);
}

TEST(TrainOps, SwigluOaiBackwardIncludingTheClamps) {
  const int64_t n = 60;
  // Values on both sides of the clamps (limit 7), kept away from the kinks themselves.
  auto gate = random_values(static_cast<size_t>(n), 6, -10.0, 10.0), up = random_values(static_cast<size_t>(n), 7, -10.0, 10.0);
  for (double* v : {gate.data(), up.data()})
    for (int64_t i = 0; i < n; ++i)
      if (std::fabs(std::fabs(v[i]) - 7.0) < 1e-3) v[i] += 0.01;
  const auto r = random_values(static_cast<size_t>(n), 8);
  auto objective = [&] {
    std::vector<double> out(static_cast<size_t>(n));
    swigluoai_forward(gate.data(), up.data(), n, 1.702, 7.0, out.data());
    return dot(r, out);
  };
  std::vector<double> dg(static_cast<size_t>(n)), du(static_cast<size_t>(n));
  swigluoai_backward(gate.data(), up.data(), r.data(), n, 1.702, 7.0, dg.data(), du.data());
  EXPECT_LT(fd_relative_error(gate, dg, objective), kTol);
  EXPECT_LT(fd_relative_error(up, du, objective), kTol);
  int clamped = 0;
  for (int64_t i = 0; i < n; ++i) clamped += (gate[size_t(i)] > 7.0) + (std::fabs(up[size_t(i)]) > 7.0);
  EXPECT_GT(clamped, 5) << "the inputs should exercise the clamps";
}

TEST(TrainOps, LinearBackward) {
  const int64_t rows = 5, in = 7, out = 3;
  auto x = random_values(size_t(rows * in), 9), w = random_values(size_t(out * in), 10);
  const auto r = random_values(size_t(rows * out), 11);
  auto objective = [&] {
    std::vector<double> y(size_t(rows * out));
    linear_forward(pool(), x.data(), w.data(), rows, in, out, y.data());
    return dot(r, y);
  };
  std::vector<double> dx(x.size()), dw(w.size(), 0.0);
  linear_backward(pool(), x.data(), w.data(), r.data(), rows, in, out, dx.data(), dw.data());
  EXPECT_LT(fd_relative_error(x, dx, objective), kTol);
  EXPECT_LT(fd_relative_error(w, dw, objective), kTol);
}

// The float linear runs on the inference matmul kernels with transposed operands.
TEST(TrainOps, FloatLinearOnTheKernelsMatchesDouble) {
  for (auto [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 3}, {37, 70, 19}, {130, 64, 257}}) {
    const auto x = random_values(size_t(rows * in), 12), w = random_values(size_t(out * in), 13),
               dy = random_values(size_t(rows * out), 14);
    std::vector<double> y(size_t(rows * out)), dx(x.size()), dw(w.size(), 0.5);
    linear_forward(pool(), x.data(), w.data(), rows, in, out, y.data());
    linear_backward(pool(), x.data(), w.data(), dy.data(), rows, in, out, dx.data(), dw.data());
    auto to_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    std::vector<float> xf = to_f(x), wf = to_f(w), dyf = to_f(dy), yf(y.size()), dxf(dx.size(), 1.0f),
                       dwf(dw.size(), 0.5f);
    linear_forward(pool(), xf.data(), wf.data(), rows, in, out, yf.data());
    linear_backward(pool(), xf.data(), wf.data(), dyf.data(), rows, in, out, dxf.data(), dwf.data(), true);
    auto worst = [](const std::vector<float>& a, const std::vector<double>& b, double shift) {
      double e = 0.0;
      for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(double(a[i]) - shift - b[i]));
      return e;
    };
    // fp32 sums of up to 130 terms of magnitude 1: errors of a few 1e-6.
    EXPECT_LT(worst(yf, y, 0.0), 1e-4) << rows << "x" << in << "x" << out;
    EXPECT_LT(worst(dxf, dx, 1.0), 1e-4);  // accumulated onto 1
    EXPECT_LT(worst(dwf, dw, 0.0), 1e-4);
  }
}

TEST(TrainOps, CrossEntropyIgnoresUntargetedRows) {
  const int64_t rows = 4, vocab = 9;
  auto z = random_values(size_t(rows * vocab), 15, -3.0, 3.0);
  const std::vector<int32_t> target = {3, -1, 0, 8};
  std::vector<double> dz(z.size());
  const double loss = cross_entropy(pool(), z.data(), target.data(), rows, vocab, dz.data());
  auto objective = [&] {
    std::vector<double> scratch(z.size());
    return cross_entropy(pool(), z.data(), target.data(), rows, vocab, scratch.data());
  };
  EXPECT_LT(fd_relative_error(z, dz, objective), kTol);
  double expect = 0.0;  // by hand, over the 3 targeted rows
  for (int64_t r : {0, 2, 3}) {
    double s = 0.0;
    for (int64_t i = 0; i < vocab; ++i) s += std::exp(z[size_t(r * vocab + i)]);
    expect += std::log(s) - z[size_t(r * vocab + target[size_t(r)])];
  }
  EXPECT_NEAR(loss, expect / 3.0, 1e-12);
  for (int64_t i = 0; i < vocab; ++i) EXPECT_EQ(dz[size_t(vocab + i)], 0.0);
}

// A sequence long enough that selection is sparse: block 3, top-2, 14 tokens (blocks 0..4).
AttentionShape small_shape() {
  AttentionShape s;
  s.tokens = 14;
  s.q_heads = 4;
  s.kv_heads = 2;
  s.head_dim = 5;
  s.index_dim = 6;
  s.block = 3;
  s.topk = 2;
  return s;
}

TEST(TrainOps, MsaSelectFollowsTheSpec) {
  const AttentionShape s = small_shape();
  const auto iq = random_values(size_t(s.tokens * s.kv_heads * s.index_dim), 16),
             ik = random_values(size_t(s.tokens * s.index_dim), 17);
  const BlockChoice c = msa_select(pool(), s, iq.data(), ik.data());
  for (int g = 0; g < s.kv_heads; ++g)
    for (int64_t p = 0; p < s.tokens; ++p) {
      const int64_t local = p / s.block;
      if (local + 1 <= s.topk) {
        ASSERT_EQ(c.count_of(g, p), local + 1);
        continue;
      }
      ASSERT_EQ(c.count_of(g, p), s.topk);
      EXPECT_EQ(c.of(g, p)[s.topk - 1], local) << "the local block is last";
      // The one earlier block chosen has the largest token-causal block max.
      std::vector<double> best(static_cast<size_t>(local), -1e300);
      for (int64_t t = 0; t < local * s.block; ++t) {
        double z = 0.0;
        for (int d = 0; d < s.index_dim; ++d)
          z += iq[size_t((p * s.kv_heads + g) * s.index_dim + d)] * ik[size_t(t * s.index_dim + d)];
        best[size_t(t / s.block)] = std::max(best[size_t(t / s.block)], z);
      }
      const int64_t top = std::max_element(best.begin(), best.end()) - best.begin();
      EXPECT_EQ(c.of(g, p)[0], top) << "g " << g << " p " << p;
    }
}

class AttentionBackward : public testing::TestWithParam<bool> {};

TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  const bool sparse = GetParam();
  const AttentionShape s = small_shape();
  const size_t qn = size_t(s.tokens * s.q_heads * s.head_dim), kn = size_t(s.tokens * s.kv_heads * s.head_dim);
  auto q = random_values(qn, 18, -2, 2), k = random_values(kn, 19, -2, 2), v = random_values(kn, 20);
  const auto iq = random_values(size_t(s.tokens * s.kv_heads * s.index_dim), 21),
             ik = random_values(size_t(s.tokens * s.index_dim), 22);
  const BlockChoice choice = msa_select(pool(), s, iq.data(), ik.data());
  const BlockChoice* c = sparse ? &choice : nullptr;
  const auto r = random_values(qn, 23);
  std::vector<double> o(qn), lse(size_t(s.tokens * s.q_heads));
  auto objective = [&] {
    std::vector<double> out(qn), l(lse.size());
    attention_forward(pool(), s, q.data(), k.data(), v.data(), c, out.data(), l.data());
    return dot(r, out);
  };
  attention_forward(pool(), s, q.data(), k.data(), v.data(), c, o.data(), lse.data());
  std::vector<double> dq(qn), dk(kn), dv(kn);
  attention_backward(pool(), s, q.data(), k.data(), v.data(), c, o.data(), lse.data(), r.data(), dq.data(), dk.data(),
                     dv.data());
  EXPECT_LT(fd_relative_error(q, dq, objective), kTol);
  EXPECT_LT(fd_relative_error(k, dk, objective), kTol);
  EXPECT_LT(fd_relative_error(v, dv, objective), kTol);
}

TEST_P(AttentionBackward, IndexerKlMatchesFiniteDifferences) {
  const bool sparse = GetParam();
  const AttentionShape s = small_shape();
  const size_t qn = size_t(s.tokens * s.q_heads * s.head_dim), kn = size_t(s.tokens * s.kv_heads * s.head_dim);
  const auto q = random_values(qn, 24, -2, 2), k = random_values(kn, 25, -2, 2), v = random_values(kn, 26);
  auto iq = random_values(size_t(s.tokens * s.kv_heads * s.index_dim), 27, -2, 2),
       ik = random_values(size_t(s.tokens * s.index_dim), 28, -2, 2);
  const BlockChoice choice = msa_select(pool(), s, iq.data(), ik.data());
  const BlockChoice* c = sparse ? &choice : nullptr;
  std::vector<double> o(qn), lse(size_t(s.tokens * s.q_heads));
  attention_forward(pool(), s, q.data(), k.data(), v.data(), c, o.data(), lse.data());
  const double coef = 0.37;
  std::vector<double> diq(iq.size()), dik(ik.size());
  const IndexerKl kl = indexer_kl(pool(), s, q.data(), k.data(), lse.data(), iq.data(), ik.data(), c, coef, diq.data(),
                                  dik.data());
  EXPECT_GT(kl.kl_sum, 0.0);
  auto objective = [&] {
    std::vector<double> a(iq.size()), b(ik.size());
    return coef * indexer_kl(pool(), s, q.data(), k.data(), lse.data(), iq.data(), ik.data(), c, coef, a.data(), b.data())
                      .kl_sum;
  };
  EXPECT_LT(fd_relative_error(iq, diq, objective), kTol);
  EXPECT_LT(fd_relative_error(ik, dik, objective), kTol);
}

INSTANTIATE_TEST_SUITE_P(DenseAndSparse, AttentionBackward, testing::Bool(),
                         [](const auto& info) { return info.param ? "Sparse" : "Dense"; });

TEST(TrainOps, IndexerKlIsZeroWhenTheStudentIsTheTeacher) {
  // One query head and one KV group, index queries = queries and index keys = keys: Q = P̄.
  AttentionShape s = small_shape();
  s.q_heads = s.kv_heads = 1;
  s.index_dim = s.head_dim;
  const size_t n = size_t(s.tokens * s.head_dim);
  const auto q = random_values(n, 29), k = random_values(n, 30), v = random_values(n, 31);
  std::vector<double> o(n), lse(size_t(s.tokens)), diq(n), dik(n);
  attention_forward(pool(), s, q.data(), k.data(), v.data(), nullptr, o.data(), lse.data());
  const IndexerKl kl =
      indexer_kl(pool(), s, q.data(), k.data(), lse.data(), q.data(), k.data(), nullptr, 1.0, diq.data(), dik.data());
  EXPECT_NEAR(kl.kl_sum, 0.0, 1e-12);
  for (double d : diq) EXPECT_NEAR(d, 0.0, 1e-12);
}

class MoeBackward : public testing::TestWithParam<bool> {};

// With the balance loss on, the objective is Σ r·y + the balance loss of two sequences.
TEST_P(MoeBackward, MatchesFiniteDifferencesWithFixedChoice) {
  const bool balance = GetParam();
  MoeShape s;
  if (balance) {
    s.balance_coef = 0.3;
    s.seq = 5;
  }
  s.ffn.hidden = 6;
  s.experts = 4;
  s.top_k = 2;
  s.routed_scaling = 2.0;
  const int64_t rows = balance ? 10 : 5, width = 3, H = s.ffn.hidden;
  auto x = random_values(size_t(rows * H), 32, -2, 2), router = random_values(size_t(s.experts * H), 33);
  const auto bias = random_values(size_t(s.experts), 34, -0.1, 0.1);
  std::vector<std::vector<double>> ew;  // per expert (gate, up, down) then the shared one
  for (int e = 0; e <= s.experts; ++e)
    for (int m = 0; m < 3; ++m) ew.push_back(random_values(size_t(width * H), 35 + uint64_t(e * 3 + m), -1.5, 1.5));
  auto params = [&] {
    MoeParams<double> w;
    w.router = router.data();
    w.bias = bias.data();
    for (int e = 0; e < s.experts; ++e)
      w.experts.push_back({ew[size_t(e * 3)].data(), ew[size_t(e * 3 + 1)].data(), ew[size_t(e * 3 + 2)].data(), width});
    w.has_shared = true;
    const size_t sh = size_t(s.experts * 3);
    w.shared = {ew[sh].data(), ew[sh + 1].data(), ew[sh + 2].data(), width};
    return w;
  };
  const auto r = random_values(size_t(rows * H), 50);
  MoeSaved<double> saved;
  std::vector<double> out(size_t(rows * H));
  moe_forward(pool(), s, params(), x.data(), rows, nullptr, saved, out.data());
  const std::vector<int32_t> choice = saved.chosen;
  auto objective = [&] {
    MoeSaved<double> sv;
    std::vector<double> y(size_t(rows * H));
    moe_forward(pool(), s, params(), x.data(), rows, choice.data(), sv, y.data());
    return dot(r, y) + sv.balance_loss;
  };
  std::vector<double> dx(x.size()), drouter(router.size(), 0.0);
  std::vector<std::vector<double>> dew;
  for (const auto& w : ew) dew.emplace_back(w.size(), 0.0);
  MoeGrads<double> g;
  g.router = drouter.data();
  for (int e = 0; e < s.experts; ++e)
    g.experts.push_back({dew[size_t(e * 3)].data(), dew[size_t(e * 3 + 1)].data(), dew[size_t(e * 3 + 2)].data()});
  const size_t sh = size_t(s.experts * 3);
  g.shared = {dew[sh].data(), dew[sh + 1].data(), dew[sh + 2].data()};
  moe_backward(pool(), s, params(), g, x.data(), rows, saved, r.data(), dx.data());
  EXPECT_LT(fd_relative_error(x, dx, objective), kTol);
  EXPECT_LT(fd_relative_error(router, drouter, objective), kTol);
  for (size_t i = 0; i < ew.size(); ++i) {
    if (std::all_of(dew[i].begin(), dew[i].end(), [](double d) { return d == 0.0; })) continue;  // an unused expert
    EXPECT_LT(fd_relative_error(ew[i], dew[i], objective), kTol) << "expert tensor " << i;
  }
  if (balance) {
    EXPECT_GT(saved.balance_loss, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutBalanceLoss, MoeBackward, testing::Bool(),
                         [](const auto& info) { return info.param ? "BalanceLoss" : "Plain"; });

}  // namespace
