// The tiled vision attention (online softmax over key blocks, AVX-512 kernels when available) vs
// the plain per-row reference, on random inputs with awkward sizes and several segments. CMake runs
// this test a second time with M3_CPU=generic (plain kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "m3/error.h"
#include "vision/vision_attention.h"

namespace m3::vision {
namespace {

struct Case {
  int64_t rows;
  int heads, head_dim;
  std::vector<int64_t> cuts;  // segment boundaries after 0, ending with rows
};

void run(const Case& c, ThreadPool& pool, float spread) {
  SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " heads " << c.heads << " head_dim " << c.head_dim);
  std::mt19937 rng(uint32_t(c.rows * 131 + c.head_dim));
  std::normal_distribution<float> nd(0.0f, spread);
  const size_t n = size_t(c.rows) * size_t(c.heads) * size_t(c.head_dim);
  std::vector<float> q(n), k(n), v(n), want(n), got(n, -1.0f);
  for (float& x : q) x = nd(rng);
  for (float& x : k) x = nd(rng);
  for (float& x : v) x = nd(rng) / spread;
  std::vector<Segment> segs;
  int64_t at = 0;
  for (int64_t cut : c.cuts) {
    segs.push_back({at, cut});
    at = cut;
  }
  vision_attention_ref(q.data(), k.data(), v.data(), c.rows, c.heads, c.head_dim, segs, want.data());
  vision_attention(pool, q.data(), k.data(), v.data(), c.rows, c.heads, c.head_dim, segs, got.data());
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < n; ++i) {
    max_err = std::max(max_err, double(std::fabs(got[i] - want[i])));
    max_ref = std::max(max_ref, double(std::fabs(want[i])));
  }
  // fp32 rounding of the scores (the scale folded into q, blockwise max) grows with their size,
  // ~eps·max|score|; here the scores reach ~spread²·sqrt(head_dim).
  const double tol = 4e-7 * std::max(1.0, double(spread * spread) * std::sqrt(double(c.head_dim)));
  EXPECT_LE(max_err, tol * max_ref) << "max |diff| " << max_err << ", max |ref| " << max_ref << ", spread " << spread;
}

TEST(VisionAttention, TiledMatchesPlainOnRandomInputs) {
  ThreadPool pool(2);
  // head_dim 80 (M3) and 16 take the AVX-512 softmax/PV; 24 and 7 the plain ones. Segments shorter
  // than a tile, tiles that end mid-segment, more than one key block (> 256 keys).
  const std::vector<Case> cases = {
      {37, 3, 80, {20, 37}},
      {1, 1, 16, {1}},
      {300, 2, 16, {4, 260, 300}},
      {600, 2, 80, {600}},
      {53, 4, 24, {17, 18, 53}},
      {70, 2, 7, {33, 70}},
  };
  for (const Case& c : cases) {
    run(c, pool, 1.0f);
    run(c, pool, 4.0f);  // peaked softmax: large score differences
  }
}

TEST(VisionAttention, SegmentsMustTileTheRows) {
  ThreadPool pool(1);
  std::vector<float> x(4 * 16, 0.5f), out(4 * 16);
  EXPECT_THROW(vision_attention(pool, x.data(), x.data(), x.data(), 4, 1, 16, {{0, 2}}, out.data()), Error);
  EXPECT_THROW(vision_attention_ref(x.data(), x.data(), x.data(), 4, 1, 16, {{0, 2}, {3, 4}}, out.data()), Error);
}

}  // namespace
}  // namespace m3::vision
