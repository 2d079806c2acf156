// Vision tower pieces (spec §5.4-§5.5): 3D RoPE dims, angles and pairs on hand cases, exact GELU,
// patch coordinates and segments, merger order, and shape/tensor errors. The whole tower is checked
// against the float64 reference in tests/integration/test_vision_reference.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "m3/error.h"
#include "base/thread_pool.h"
#include "fixtures/random_checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "vision/vision_tower.h"

using namespace m3;
using namespace m3::vision;

TEST(VisionRope, AxisDims) {
  EXPECT_EQ(rope_axis_dim(80), 26);  // M3: 26/26/26 + 2 pass-through
  EXPECT_EQ(rope_axis_dim(16), 4);   // tiny test towers: 4/4/4 + 4
  EXPECT_EQ(rope_axis_dim(64), 20);
  EXPECT_EQ(Rope3d(10000.0, 80).half(), 39);
  EXPECT_THROW(Rope3d(10000.0, 5), Error);
}

TEST(VisionRope, AnglesHandCase) {
  // head_dim 16, theta 100: axis 4, frequencies 100^0 = 1 and 100^(-2/4) = 0.1 per axis.
  Rope3d rope(100.0, 16);
  const std::vector<double> a = rope.angles({2, 3, 5});
  const std::vector<double> want = {2, 0.2, 3, 0.3, 5, 0.5};
  ASSERT_EQ(a.size(), want.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-15) << i;
  // M3: f_k = 10000^(-2k/26), k = 0..12; the h block starts at index 13.
  const std::vector<double> m = Rope3d(10000.0, 80).angles({0, 1, 0});
  ASSERT_EQ(m.size(), 39u);
  EXPECT_EQ(m[0], 0.0);
  EXPECT_DOUBLE_EQ(m[13], 1.0);
  EXPECT_NEAR(m[14], std::pow(10000.0, -2.0 / 26), 1e-15);
  EXPECT_NEAR(m[25], std::pow(10000.0, -24.0 / 26), 1e-15);
  EXPECT_EQ(m[26], 0.0);
}

TEST(VisionRope, NeoxPairsAndPassThrough) {
  Rope3d rope(100.0, 16);
  rope.build({{2, 3, 5}});
  const double ang[6] = {2, 0.2, 3, 0.3, 5, 0.5};
  for (int j = 0; j < 6; ++j) {
    std::vector<float> v(32, 0.0f);  // two heads
    v[size_t(j)] = 1.0f;             // head 0: unit vector in the first half of pair j
    v[16 + size_t(j) + 6] = 1.0f;    // head 1: unit vector in the second half of pair j
    for (int d = 12; d < 16; ++d) v[size_t(d)] = v[16 + size_t(d)] = float(d);
    rope.apply(v.data(), 0, 2);
    EXPECT_NEAR(v[size_t(j)], std::cos(ang[j]), 1e-6);
    EXPECT_NEAR(v[size_t(j) + 6], std::sin(ang[j]), 1e-6);
    EXPECT_NEAR(v[16 + size_t(j)], -std::sin(ang[j]), 1e-6);
    EXPECT_NEAR(v[16 + size_t(j) + 6], std::cos(ang[j]), 1e-6);
    for (int d = 0; d < 12; ++d)
      if (d != j && d != j + 6) {
        EXPECT_EQ(v[size_t(d)], 0.0f) << d;
      }
    for (int d = 12; d < 16; ++d) {
      EXPECT_EQ(v[size_t(d)], float(d));  // dims >= 3*axis pass through
      EXPECT_EQ(v[16 + size_t(d)], float(d));
    }
  }
  // M3 head_dim 80: dims 78 and 79 are never rotated.
  Rope3d m3rope(10000.0, 80);
  m3rope.build({{1, 7, 9}});
  std::vector<float> v(80, 1.0f);
  m3rope.apply(v.data(), 0, 1);
  EXPECT_EQ(v[78], 1.0f);
  EXPECT_EQ(v[79], 1.0f);
  EXPECT_NE(v[77], 1.0f);
}

TEST(VisionRope, InterleavedHfVariant) {
  // head_dim 16: t 4 dims, h 4, w 8 (M3: 26/26/28); pairs (2k, 2k+1) inside each axis block.
  Rope3d rope(100.0, 16, VisionRopeVariant::InterleavedHf);
  ASSERT_EQ(rope.pairs(), 8);
  for (int p = 0; p < 8; ++p) {
    EXPECT_EQ(rope.first(p), 2 * p);
    EXPECT_EQ(rope.second(p), 2 * p + 1);
  }
  const std::vector<double> a = rope.angles({2, 3, 5});
  const std::vector<double> want = {2, 0.2, 3, 0.3, 5, 5 * std::pow(100.0, -0.25), 0.5, 5 * std::pow(100.0, -0.75)};
  ASSERT_EQ(a.size(), want.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-14) << i;
  rope.build({{2, 3, 5}});
  std::vector<float> v(16, 0.0f);
  v[10] = 1.0f;  // first dim of the w axis' second pair
  rope.apply(v.data(), 0, 1);
  EXPECT_NEAR(v[10], std::cos(want[5]), 1e-6);
  EXPECT_NEAR(v[11], std::sin(want[5]), 1e-6);
  EXPECT_EQ(Rope3d(10000.0, 80, VisionRopeVariant::InterleavedHf).pairs(), 40);  // 13 + 13 + 14
  // The spec's variant as a pair list: (j, j + 39) for M3.
  Rope3d neox(10000.0, 80);
  EXPECT_EQ(neox.first(38), 38);
  EXPECT_EQ(neox.second(38), 77);
}

TEST(VisionGelu, ExactErf) {
  EXPECT_EQ(gelu_erf(0.0f), 0.0f);
  EXPECT_NEAR(gelu_erf(1.0f), 0.8413447460685429, 1e-7);
  EXPECT_NEAR(gelu_erf(-1.0f), -0.15865525393145707, 1e-7);
  EXPECT_NEAR(gelu_erf(3.0f), 2.99595030590511, 2e-6);
  EXPECT_NEAR(gelu_erf(-0.5f), -0.15426876936299347, 1e-7);  // tanh approximation gives -0.154286
}

TEST(VisionPositions, MergeWindowOrder) {
  // grid 1x4x4, merge 2: rows go (bh, bw, sh, sw); each 4 consecutive rows are one 2x2 window.
  const std::vector<PatchPosition> p = patch_positions({1, 4, 4}, 2, 4);
  ASSERT_EQ(p.size(), 16u);
  const std::vector<PatchPosition> want = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {0, 0, 2}, {0, 0, 3},
                                           {0, 1, 2}, {0, 1, 3}, {0, 2, 0}, {0, 2, 1}, {0, 3, 0}, {0, 3, 1},
                                           {0, 2, 2}, {0, 2, 3}, {0, 3, 2}, {0, 3, 3}};
  EXPECT_EQ(p, want);
  // Non-square: grid 1x2x6 -> row 4 is window (0, 1) -> patch (0, 2).
  const std::vector<PatchPosition> q = patch_positions({1, 2, 6}, 2, 4);
  EXPECT_EQ(q[4], (PatchPosition{0, 0, 2}));
  EXPECT_EQ(q[11], (PatchPosition{0, 1, 5}));
}

TEST(VisionPositions, VideoSegmentsRestartT) {
  const GridThw g{6, 2, 2};
  const std::vector<Segment> s = attention_segments(g, 4);
  EXPECT_EQ(s, (std::vector<Segment>{{0, 16}, {16, 24}}));
  const std::vector<PatchPosition> p = patch_positions(g, 2, 4);
  EXPECT_EQ(p[12].t, 3);
  EXPECT_EQ(p[16].t, 0);  // 5th temporal group starts a new segment
  EXPECT_EQ(p[23].t, 1);
  EXPECT_EQ(attention_segments({1, 4, 6}, 4), (std::vector<Segment>{{0, 24}}));
}

TEST(VisionPositions, BadGrids) {
  EXPECT_THROW(check_grid({1, 3, 4}, 2), Error);
  EXPECT_THROW(check_grid({0, 4, 4}, 2), Error);
  EXPECT_NO_THROW(check_grid({1, 2, 8}, 2));
}

namespace {

struct TempCheckpoint {
  std::string dir;
  explicit TempCheckpoint(const std::string& preset) {
    dir = (std::filesystem::temp_directory_path() / ("m3_vision_tower_test_" + preset + "_" + std::to_string(getpid())))
              .string();
    RandomCheckpointOptions o;
    o.preset = preset;
    o.seed = 3;
    o.out_dir = dir;
    make_random_checkpoint(o);
  }
  ~TempCheckpoint() { std::filesystem::remove_all(dir); }
};

}  // namespace

TEST(VisionTower, MergerTakesEachWindowOfConsecutiveRows) {
  TempCheckpoint ck("tiny-vl");
  const ModelConfig cfg = ModelConfig::from_file(ck.dir + "/config.json");
  const TensorStore store = TensorStore::open_dir(ck.dir);
  ThreadPool pool(2);
  VisionTower tower(cfg, store, pool);
  const int64_t P = tower.output_dim();
  ASSERT_EQ(P, cfg.text.hidden_size);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> z(size_t(8 * P));
  for (float& v : z) v = nd(rng);
  const std::vector<float> out = tower.merge(z.data(), 8);
  ASSERT_EQ(out.size(), size_t(2 * P));
  // Output row 1 depends on input rows 4..7 only.
  const std::vector<float> second = tower.merge(z.data() + 4 * P, 4);
  for (int64_t i = 0; i < P; ++i) ASSERT_EQ(out[size_t(P + i)], second[size_t(i)]);
  // Order inside a window matters (concatenation, not a sum): swapping rows 0 and 1 changes row 0.
  std::vector<float> swapped = z;
  std::swap_ranges(swapped.begin(), swapped.begin() + P, swapped.begin() + P);
  const std::vector<float> out2 = tower.merge(swapped.data(), 8);
  double d0 = 0, d1 = 0;
  for (int64_t i = 0; i < P; ++i) {
    d0 += std::abs(out2[size_t(i)] - out[size_t(i)]);
    d1 += std::abs(out2[size_t(P + i)] - out[size_t(P + i)]);
  }
  EXPECT_GT(d0, 1e-3);
  EXPECT_EQ(d1, 0.0);
  EXPECT_THROW(tower.merge(z.data(), 6), Error);

  // Shape errors.
  const int64_t cols = cfg.vision->patch_input_dim();
  std::vector<float> px(size_t(24 * cols), 0.1f);
  EXPECT_EQ(tower.forward(px.data(), 24, cols, {1, 4, 6}).size(), size_t(6 * P));
  EXPECT_THROW(tower.forward(px.data(), 24, cols, {1, 4, 4}), Error);      // rows != t*h*w
  EXPECT_THROW(tower.forward(px.data(), 24, cols - 1, {1, 4, 6}), Error);  // cols != 1176
  EXPECT_THROW(tower.forward(px.data(), 24, cols, {1, 3, 8}), Error);      // h not a multiple of 2
}

TEST(VisionTower, NeedsAVisionCheckpoint) {
  TempCheckpoint ck("tiny");
  const ModelConfig cfg = ModelConfig::from_file(ck.dir + "/config.json");
  const TensorStore store = TensorStore::open_dir(ck.dir);
  ThreadPool pool(1);
  try {
    VisionTower tower(cfg, store, pool);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vision"), std::string::npos) << e.what();
  }
}
