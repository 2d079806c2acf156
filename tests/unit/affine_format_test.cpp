// The affine layout mlx-lm writes (format/weight_format.h, docs/FORMATS.md): U32 words packing
// 4- or 8-bit values (element 0 in the lowest bits) with a bf16 scale and bias per group of 32, 64
// or 128 columns, W = scale x q + bias. Its dequantization follows that packing; the SIMD panel
// fills give the scalar dequantization's bits in the lane order (kernels/matmul_tile.h: pairs for
// 4-bit, sequential for 8-bit); and its matmul on every CPU path equals, bit for bit, the f32
// matmul of the dequantized weights with x and W in that order, for every batch size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "format/linear_weight.h"
#include "format/weight_format.h"
#include "kernels/matmul.h"
#include "kernels/matmul_tile.h"

using namespace m3;

namespace {

constexpr CpuPath kPaths[] = {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve};

// Where element c of a row sits in the lane order of its 32-block: the pair order puts the even
// elements in lanes 0-15 (pass 0) and the odd ones in pass 1.
int64_t lane_position(int64_t c, bool pairs) {
  const int64_t e = c % 32;
  return c - e + (pairs ? (e % 2) * 16 + e / 2 : e);
}

// Rows of `cols` values, each element moved to its lane position: the sequential (f32) order of
// the result is the pair order of the input.
std::vector<float> in_lane_order(const std::vector<float>& v, int64_t cols, bool pairs) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[size_t(int64_t(i) / cols * cols + lane_position(int64_t(i) % cols, pairs))] = v[i];
  return out;
}

// A random affine weight: values q in [0, 2^bits), scales and biases bf16 of a trained model's size.
struct RandomAffine {
  std::vector<uint32_t> words;
  std::vector<uint16_t> scales, biases;
  LinearWeight w;
  RandomAffine(int bits, int group, int64_t rows, int64_t cols, uint64_t seed)
      : words(size_t(rows * cols * bits / 32)), scales(size_t(rows * cols / group)), biases(scales.size()) {
    std::mt19937_64 rng(seed);
    for (auto& v : words) v = uint32_t(rng());
    std::normal_distribution<float> nd;
    for (size_t i = 0; i < scales.size(); ++i) {
      scales[i] = f32_to_bf16(0.01f * (1.0f + std::fabs(nd(rng))));
      biases[i] = f32_to_bf16(0.05f * nd(rng));
    }
    w.format = affine_format(bits, group);
    w.data = reinterpret_cast<const uint8_t*>(words.data());
    w.side[0] = reinterpret_cast<const uint8_t*>(scales.data());
    w.side[1] = reinterpret_cast<const uint8_t*>(biases.data());
    w.rows = rows;
    w.cols = cols;
  }
};

std::vector<float> dequantized(const LinearWeight& w) {
  std::vector<float> d(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) w.row_to_f32(r, d.data() + r * w.cols);
  return d;
}

}  // namespace

TEST(AffineFormat, ValuesArePackedFromTheLowestBitsAndMappedThroughTheirGroup) {
  ASSERT_NE(affine_format(4, 64), nullptr);
  EXPECT_EQ(affine_format(4, 64)->name, "affine4-g64");
  EXPECT_EQ(affine_format(3, 64), nullptr);
  EXPECT_EQ(affine_format(4, 48), nullptr);
  RandomAffine a(4, 32, 1, 64, 1);
  a.words[0] = 0x76543210u;  // elements 0..7 = 0, 1, ..., 7
  a.words[1] = 0xfedcba98u;  // elements 8..15 = 8 .. 15
  a.scales[0] = f32_to_bf16(0.5f);
  a.biases[0] = f32_to_bf16(-1.0f);
  a.scales[1] = f32_to_bf16(2.0f);
  a.biases[1] = f32_to_bf16(0.25f);
  a.words[4] = 0x0000000fu;  // element 32 = 15 (group 1)
  std::vector<float> row(64);
  a.w.row_to_f32(0, row.data());
  for (int c = 0; c < 16; ++c) EXPECT_EQ(row[size_t(c)], 0.5f * float(c) - 1.0f) << c;
  EXPECT_EQ(row[32], 2.0f * 15 + 0.25f);

  RandomAffine b(8, 32, 1, 32, 2);
  b.words[0] = 0x04ff0201u;  // elements 0..3 = 1, 2, 255, 4
  b.scales[0] = f32_to_bf16(1.0f);
  b.biases[0] = f32_to_bf16(0.0f);
  b.w.row_to_f32(0, row.data());
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[1], 2.0f);
  EXPECT_EQ(row[2], 255.0f);
  EXPECT_EQ(row[3], 4.0f);
  // A column range inside a group gives the same values as the whole row.
  std::vector<float> part(8);
  b.w.format->dequantize_cols(b.w, 0, 8, 16, part.data());
  std::vector<float> whole(32);
  b.w.row_to_f32(0, whole.data());
  EXPECT_EQ(0, std::memcmp(part.data(), whole.data() + 8, 8 * sizeof(float)));
}

TEST(AffineFormat, SimdPanelFillsEqualTheScalarDequantization) {
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      const int64_t rows = 5, cols = 256;
      RandomAffine a(bits, group, rows, cols, uint64_t(bits * 1000 + group));
      // Each SIMD path's fill, and the Highway one where the path has a hand-written one too (AVX2).
      std::vector<std::pair<std::string, matmul_detail::PanelFill>> fills;
      for (CpuPath path : {CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
        if (!cpu_path_supported(path)) continue;
        fills.emplace_back(cpu_path_name(path), matmul_detail::affine_panel_fill(path, bits));
        ASSERT_NE(fills.back().second, nullptr) << cpu_path_name(path);
        if (const matmul_detail::BlockedSimdKernels* h = matmul_detail::simd_blocked_kernels(path))
          fills.emplace_back(std::string(cpu_path_name(path)) + " (Highway)", bits == 4 ? h->affine4 : h->affine8);
      }
      for (const auto& [name, fill] : fills) {
        std::vector<float> buf(size_t(rows * cols) + 16), want(static_cast<size_t>(cols));
        float* panel = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
        fill(a.w, 0, 1, int(rows), 0, cols / 32, panel);
        for (int64_t r = 0; r < rows; ++r) {
          a.w.row_to_f32(r, want.data());
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_EQ(panel[((c / 32) * rows + r) * 32 + lane_position(c, bits == 4) % 32], want[size_t(c)])
                << name << " bits " << bits << " group " << group << " r " << r << " c " << c;
        }
      }
    }
}

TEST(AffineFormat, MatmulEqualsTheF32MatmulOfTheDequantizedWeightsOnEveryPath) {
  ThreadPool pool(2);
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      // K = 36 blocks: the direct tiles take each row's group parameters in chunks of 16, 16 and 4 blocks.
      const int64_t N = 70, K = 1152;
      RandomAffine a(bits, group, N, K, uint64_t(7 + bits + group));
      const std::vector<float> d = dequantized(a.w);
      ASSERT_EQ(matmul_detail::pair_lane_order(*a.w.format), bits == 4);
      const std::vector<float> d_lanes = in_lane_order(d, K, bits == 4);
      const LinearWeight f = dense_weight(DType::F32, d_lanes.data(), N, K);
      for (CpuPath path : kPaths) {
        if (!cpu_path_supported(path)) continue;
        const MatmulKernel ak = find_matmul_kernel(*a.w.format, path), fk = find_matmul_kernel(f32_format(), path);
        ASSERT_NE(ak, nullptr) << cpu_path_name(path);
        std::vector<float> first_out;
        for (int64_t M : {1, 2, 5, 33, 70}) {
          std::mt19937 rng{unsigned(M)};
          std::normal_distribution<float> nd;
          std::vector<float> x(size_t(M * K)), y(size_t(M * N)), want(y.size());
          for (int64_t i = 0; i < M * K; ++i) x[size_t(i)] = i < K ? std::sin(float(i)) : nd(rng);  // row 0 fixed
          ak(path, pool, x.data(), nullptr, M, a.w, y.data());
          const std::vector<float> x_lanes = in_lane_order(x, K, bits == 4);
          fk(path, pool, x_lanes.data(), nullptr, M, f, want.data());
          ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float)))
              << cpu_path_name(path) << " bits " << bits << " M=" << M;
          for (int64_t n = 0; n < N; ++n) {  // row 0 against float64
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              ref += double(x[size_t(k)]) * d[size_t(n * K + k)];
              mag += std::fabs(double(x[size_t(k)]) * d[size_t(n * K + k)]);
            }
            ASSERT_NEAR(y[size_t(n)], ref, 1e-5 * mag + 1e-30) << cpu_path_name(path);
          }
          if (first_out.empty()) first_out.assign(y.begin(), y.begin() + N);
          else ASSERT_EQ(0, std::memcmp(first_out.data(), y.data(), size_t(N) * sizeof(float))) << "row 0 changed with M";
        }
      }
    }
}

// The planner's blocking never changes a bit: panels whose chunks of K start inside a group (1 or 3
// blocks per chunk against groups of 2 and 4 blocks) and direct tiles over other runs of rows give
// the default plan's results, with each path's own fills and tiles.
TEST(AffineFormat, BlockingChangesNoBitOnEveryPath) {
  ThreadPool pool(2);
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      const int64_t N = 23, K = 1152, M = 7;
      RandomAffine a(bits, group, N, K, uint64_t(50 + bits + group));
      std::mt19937 rng{unsigned(bits + group)};
      std::normal_distribution<float> nd;
      std::vector<float> x(size_t(M * K));
      for (float& v : x) v = nd(rng);
      for (CpuPath path : kPaths) {
        if (!cpu_path_supported(path)) continue;
        std::vector<float> want(size_t(M * N)), y(want.size());
        find_matmul_kernel(*a.w.format, path)(path, pool, x.data(), nullptr, M, a.w, want.data());
        std::vector<matmul_detail::MatmulPlan> plans;
        for (int64_t kc : {1, 3, 5}) {
          matmul_detail::MatmulPlan p = matmul_detail::default_matmul_plan(path, M, N, K);
          p.blocked = true;
          p.mc = 4;
          p.nc = 6;
          p.kc_blocks = kc;
          p.weights_outer = kc == 3;
          p.fill = matmul_detail::affine_panel_fill(path, bits);
          plans.push_back(p);
        }
        // The path's direct tiles, and their Highway copy where it has one (AVX2: the one
        // NEON and SVE run, checked here against the hand-written tiles' bits).
        std::vector<matmul_detail::BlockedTile> tiles{matmul_detail::affine_direct_tile(path, bits)};
        if (const matmul_detail::BlockedSimdKernels* h = matmul_detail::simd_blocked_kernels(path))
          tiles.push_back(bits == 4 ? h->affine4_tile : h->affine8_tile);
        for (matmul_detail::BlockedTile tile : tiles)
          for (int streams : {1, 3, 6}) {
            if (tile == nullptr) continue;
            matmul_detail::MatmulPlan p = matmul_detail::default_matmul_plan(path, M, N, K);
            p.blocked = false;
            p.streams = streams;
            p.blocked_tile = tile;
            plans.push_back(p);
          }
        for (const matmul_detail::MatmulPlan& p : plans) {
          std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
          matmul_detail::matmul_run(path, p, pool, x.data(), nullptr, M, a.w, y.data());
          ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float)))
              << cpu_path_name(path) << " bits " << bits << " group " << group << " kc " << p.kc_blocks
              << (p.blocked ? " panels" : " direct tiles");
        }
      }
    }
}
