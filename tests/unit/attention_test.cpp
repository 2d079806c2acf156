// MSA selection and block attention against plain formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "attention/block_attention.h"
#include "attention/msa_select.h"

using namespace m3;

TEST(MsaSelect, DenseWhileVisibleBlocksFitTopk) {
  std::vector<float> scores(20, 0.0f);
  std::vector<int32_t> out;
  for (int64_t L = 0; L < 16; ++L) {
    msa_select_blocks(scores.data(), L, 16, out);
    ASSERT_EQ(int64_t(out.size()), L + 1);
    for (int64_t b = 0; b <= L; ++b) EXPECT_EQ(out[size_t(b)], b);
  }
}

TEST(MsaSelect, SeventeenBlocksDropTheWorst) {
  // 17 visible blocks (L = 16): 15 of blocks 0..15 plus the local one.
  std::vector<float> scores(16);
  for (int b = 0; b < 16; ++b) scores[size_t(b)] = float(b);
  scores[3] = -5.0f;
  std::vector<int32_t> out;
  msa_select_blocks(scores.data(), 16, 16, out);
  ASSERT_EQ(out.size(), 16u);
  EXPECT_EQ(std::count(out.begin(), out.end(), 3), 0);
  EXPECT_EQ(out.back(), 16);
}

TEST(MsaSelect, TiesGoToTheSmallerBlockId) {
  // All-zero index q/k at p = 2303 (L = 17): the spec's example selects [0..14] + 17.
  std::vector<float> scores(17, 0.0f);
  std::vector<int32_t> out;
  msa_select_blocks(scores.data(), 17, 16, out);
  std::vector<int32_t> want;
  for (int b = 0; b < 15; ++b) want.push_back(b);
  want.push_back(17);
  EXPECT_EQ(out, want);
}

TEST(MsaSelect, NaNRanksLast) {
  std::vector<float> scores(20, 1.0f);
  scores[0] = NAN;
  std::vector<int32_t> out;
  msa_select_blocks(scores.data(), 20, 16, out);
  EXPECT_EQ(std::count(out.begin(), out.end(), 0), 0);
}

TEST(MsaSelect, FastMatchesReferenceOnRandomScoresWithTies) {
  std::mt19937 rng(7);
  std::vector<int32_t> a, b;
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t L = std::uniform_int_distribution<int>(0, 300)(rng);
    const int topk = std::uniform_int_distribution<int>(2, 20)(rng);
    std::vector<float> s(size_t(L) + 1);
    const int levels = std::uniform_int_distribution<int>(1, 8)(rng);  // few levels -> many ties
    for (float& x : s) x = float(std::uniform_int_distribution<int>(0, levels)(rng));
    msa_select_blocks(s.data(), L, topk, a);
    msa_select_blocks_ref(s.data(), L, topk, b);
    ASSERT_EQ(a, b) << "L=" << L << " topk=" << topk;
    ASSERT_EQ(int64_t(a.size()), std::min<int64_t>(L + 1, topk));
    ASSERT_EQ(a.back(), L);
  }
}

TEST(MsaBlockScores, MaxOverEachBlock) {
  std::mt19937 rng(8);
  std::normal_distribution<float> d;
  const int B = 5, dim = 7;
  const int64_t L = 4;
  std::vector<float> q(dim), keys(size_t(L * B * dim));
  for (float& x : q) x = d(rng);
  for (float& x : keys) x = d(rng);
  std::vector<float> out(static_cast<size_t>(L));
  msa_block_scores(q.data(), dim, B, L, 0.5f, [&](int64_t b) { return keys.data() + b * B * dim; }, out.data());
  for (int64_t b = 0; b < L; ++b) {
    double best = -1e30;
    for (int t = 0; t < B; ++t) {
      double s = 0;
      for (int i = 0; i < dim; ++i) s += double(q[i]) * keys[size_t((b * B + t) * dim + i)];
      best = std::max(best, s * 0.5);
    }
    EXPECT_NEAR(out[size_t(b)], best, 1e-5);
  }
}

TEST(BlockAttention, EqualsSoftmaxOverSelectedCausalKeys) {
  std::mt19937 rng(9);
  std::normal_distribution<float> d;
  const int B = 4, hd = 6, nblocks = 6;
  std::vector<float> k(size_t(nblocks * B * hd)), v(k.size()), q(hd);
  for (float& x : k) x = d(rng);
  for (float& x : v) x = d(rng);
  for (float& x : q) x = d(rng);
  const int64_t pos = 21;  // local block 5, slot 1: keys 20 and 21 visible in it
  const std::vector<int32_t> blocks = {1, 3, 5};
  std::vector<float> out(hd), scratch(B);
  attend_blocks(q.data(), hd, B, pos, blocks, 0.4f, [&](int32_t b) { return k.data() + b * B * hd; },
                [&](int32_t b) { return v.data() + b * B * hd; }, scratch.data(), out.data());
  std::vector<int> keys;
  for (int b : blocks)
    for (int t = b * B; t < (b + 1) * B; ++t)
      if (t <= pos) keys.push_back(t);
  std::vector<double> w;
  double mx = -1e30, sum = 0;
  for (int t : keys) {
    double s = 0;
    for (int i = 0; i < hd; ++i) s += double(q[i]) * k[size_t(t * hd + i)];
    w.push_back(s * 0.4);
    mx = std::max(mx, s * 0.4);
  }
  for (double& x : w) sum += x = std::exp(x - mx);
  for (int i = 0; i < hd; ++i) {
    double o = 0;
    for (size_t j = 0; j < keys.size(); ++j) o += w[j] / sum * v[size_t(keys[j] * hd + i)];
    EXPECT_NEAR(out[i], o, 1e-5);
  }
}
