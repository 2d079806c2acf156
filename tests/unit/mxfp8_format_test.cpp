// MXFP8 (the official release's layout) below the model: the OCP dequantization rules, the SIMD
// panel fills (hand-written and Highway) against the scalar tables for every code and scale, and
// the matmul on every path against the f32 matmul of the dequantized weights. Built for aarch64
// too, so NEON and SVE run under qemu (scripts/test_aarch64.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "fixtures/random_mxfp8.h"
#include "format/linear_weight.h"
#include "format/weight_format.h"
#include "kernels/matmul.h"
#include "kernels/matmul_tile.h"

using namespace m3;

TEST(Mxfp8Format, DequantizationFollowsTheOcpRules) {
  RandomMxfp8 m(1, 64, 1);
  m.q[0] = 0x38;       // e4m3 1.0
  m.q[1] = 0xc0;       // -2.0
  m.q[2] = 0x7e;       // 448, the largest
  m.q[3] = 0x01;       // 2^-9, the smallest subnormal
  m.q[32] = 0x7f;      // NaN
  m.scales[0] = 127;   // x 1
  m.scales[1] = 130;   // x 8
  std::vector<float> row(64);
  m.w.row_to_f32(0, row.data());
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[1], -2.0f);
  EXPECT_EQ(row[2], 448.0f);
  EXPECT_EQ(row[3], std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(row[32]));
  EXPECT_EQ(row[33], f8e4m3_to_f32(m.q[33]) * 8.0f);
  m.scales[1] = 255;  // a NaN scale makes its whole block NaN
  m.w.row_to_f32(0, row.data());
  EXPECT_TRUE(std::isnan(row[40]));
  EXPECT_FALSE(std::isnan(row[4]));
}

TEST(Mxfp8Format, ScaleBytesDecodeToExactPowersOfTwo) {
  for (int s = 0; s < 255; ++s) EXPECT_EQ(ue8m0_to_f32(uint8_t(s)), std::ldexp(1.0f, s - 127)) << s;
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(255)));
}

// The SIMD panel fills widen every E4M3 code (subnormals, both zeros, NaN, 448) under extreme
// scales exactly as the scalar tables do.
TEST(Mxfp8Format, SimdPanelFillEqualsTheScalarDequantizationForEveryCodeAndScale) {
  const int64_t rows = 3, cols = 256;
  RandomMxfp8 m(rows, cols, 5);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) m.q[size_t(r * cols + c)] = uint8_t((c + 37 * r) % 256);
  const uint8_t scales[] = {0, 1, 100, 126, 127, 128, 200, 254, 255};
  // Each SIMD path's fill, and the Highway one where the path has a hand-written one too (AVX2).
  std::vector<std::pair<std::string, matmul_detail::PanelFill>> fills;
  for (CpuPath path : {CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!cpu_path_supported(path)) continue;
    fills.emplace_back(cpu_path_name(path), matmul_detail::mxfp8_panel_fill(path));
    ASSERT_NE(fills.back().second, nullptr) << cpu_path_name(path);
    if (const matmul_detail::BlockedSimdKernels* h = matmul_detail::simd_blocked_kernels(path))
      fills.emplace_back(std::string(cpu_path_name(path)) + " (Highway)", h->mxfp8);
  }
  for (const auto& [name, fill] : fills) {
    for (uint8_t s : scales) {
      std::fill(m.scales.begin(), m.scales.end(), s);
      m.scales[1] = 127;  // one block of row 0 at another scale
      std::vector<float> panel(static_cast<size_t>(rows * cols) + 16), want(static_cast<size_t>(cols));
      float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(panel.data()) + 63) & ~uintptr_t(63));
      fill(m.w, 0, 1, int(rows), 0, cols / 32, aligned);
      for (int64_t r = 0; r < rows; ++r) {
        m.w.format->dequantize_cols(m.w, r, 0, cols, want.data());
        for (int64_t c = 0; c < cols; ++c) {
          const float got = aligned[((c / 32) * rows + r) * 32 + c % 32];
          const float exp = want[size_t(c)];
          if (std::isnan(exp)) {
            EXPECT_TRUE(std::isnan(got)) << name;
          } else {
            uint32_t a, b;
            std::memcpy(&a, &got, 4);
            std::memcpy(&b, &exp, 4);
            ASSERT_EQ(a, b) << name << " code " << int(m.q[size_t(r * cols + c)]) << " scale " << int(s);
          }
        }
      }
    }
  }
}

TEST(Mxfp8Format, MatmulEqualsTheF32MatmulOfTheDequantizedWeightsOnEveryPath) {
  ThreadPool pool(2);
  const int64_t N = 70, K = 320;
  RandomMxfp8 m(N, K, 7);
  const std::vector<float> d = dequantized(m.w);
  const LinearWeight f = dense_weight(DType::F32, d.data(), N, K);
  for (CpuPath path : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!cpu_path_supported(path)) continue;
    const MatmulKernel mk = find_matmul_kernel(mxfp8_format(), path), fk = find_matmul_kernel(f32_format(), path);
    ASSERT_NE(mk, nullptr) << cpu_path_name(path);
    std::vector<float> first_row, first_out;
    for (int64_t M : {1, 2, 5, 33, 70}) {
      std::mt19937 rng{unsigned(M)};
      std::normal_distribution<float> nd;
      std::vector<float> x(size_t(M * K)), y(size_t(M * N)), want(y.size());
      for (auto& v : x) v = nd(rng);
      if (!first_row.empty()) std::copy(first_row.begin(), first_row.end(), x.begin());
      mk(path, pool, x.data(), nullptr, M, m.w, y.data());
      fk(path, pool, x.data(), nullptr, M, f, want.data());
      ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float))) << cpu_path_name(path) << " M=" << M;
      // Against float64: the sums agree to fp32 rounding of K terms.
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            ref += double(x[size_t(i * K + k)]) * d[size_t(n * K + k)];
            mag += std::fabs(double(x[size_t(i * K + k)]) * d[size_t(n * K + k)]);
          }
          ASSERT_NEAR(y[size_t(i * N + n)], ref, 1e-5 * mag + 1e-30) << cpu_path_name(path);
        }
      // Row 0 of x is the same in every batch: its outputs do not depend on M.
      if (first_row.empty()) {
        first_row.assign(x.begin(), x.begin() + K);
        first_out.assign(y.begin(), y.begin() + N);
      } else {
        ASSERT_EQ(0, std::memcmp(first_out.data(), y.data(), size_t(N) * sizeof(float))) << cpu_path_name(path) << " M=" << M;
      }
    }
  }
}

// The direct tiles only flag NaN codes as they widen, and run a tile again with a check per block
// when one was seen; scales whose factor one fp32 cannot hold (past 2^119 for the F16 widening,
// 2^7 for the F32 one) take two multiplies. Rows holding either must still give what the f32
// matmul of the dequantized weights gives, at every M (direct tiles and panels), and the rows
// beside them in the same tile must not change.
TEST(Mxfp8Format, NanCodesAndHugeScalesGiveTheDequantizedResultInEveryTile) {
  ThreadPool pool(2);
  const int64_t N = 40, K = 1056;  // 33 blocks: a second chunk of block factors with one block
  const int64_t KB = K / 32;
  RandomMxfp8 m(N, K, 11);
  m.q[size_t(5 * K + 700)] = 0x7f;   // row 5: a NaN code in the first chunk, second block of a pair
  m.q[size_t(6 * K + 1040)] = 0xff;  // row 6: a negative NaN code in the last block
  m.q[size_t(7 * K + 200)] = 0x7f;   // row 7: a NaN code in the first block of a pair (the AVX-512 tile checks pairs)
  for (int64_t b = 0; b < KB; b += 3) m.scales[size_t(9 * KB + b)] = uint8_t(247 + b % 8);  // row 9
  for (int64_t b = 1; b < KB; b += 4) m.scales[size_t(12 * KB + b)] = uint8_t(135 + 4 * b);  // row 12: 2^12..2^124
  for (int64_t b = 0; b < KB; b += 2) m.scales[size_t(14 * KB + b)] = uint8_t(b % 9);  // row 14: subnormal products
  for (int64_t c = 0; c < K; ++c) {  // rows 9 and 12: values small enough that huge scales stay finite
    if (m.scales[size_t(9 * KB + c / 32)] >= 247) m.q[size_t(9 * K + c)] &= 0x87;
    if (m.scales[size_t(12 * KB + c / 32)] >= 135) m.q[size_t(12 * K + c)] &= 0x87;
  }
  const std::vector<float> d = dequantized(m.w);
  const LinearWeight f = dense_weight(DType::F32, d.data(), N, K);
  for (CpuPath path : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!cpu_path_supported(path)) continue;
    const MatmulKernel mk = find_matmul_kernel(mxfp8_format(), path), fk = find_matmul_kernel(f32_format(), path);
    // The Highway direct tiles where the path has them besides its own (AVX2: the ones NEON and
    // SVE run), forced through a direct-tile plan.
    const matmul_detail::BlockedSimdKernels* h = matmul_detail::simd_blocked_kernels(path);
    const matmul_detail::BlockedTile highway = h != nullptr && h->mxfp8_tile != matmul_detail::mxfp8_direct_tile(path)
                                                   ? h->mxfp8_tile
                                                   : nullptr;
    // Every widening of the path's own direct tiles, whichever this CPU runs by default.
    std::vector<std::pair<std::string, matmul_detail::BlockedTile>> forced_tiles;
    if (highway != nullptr) forced_tiles.emplace_back(" (Highway tiles)", highway);
    if (path == CpuPath::Avx512 || path == CpuPath::Avx2)
      for (matmul_detail::Mxfp8Widening widening : matmul_detail::mxfp8_widenings(path))
        forced_tiles.emplace_back(std::string(" (") + matmul_detail::mxfp8_widening_name(widening) + " widening)",
                                  matmul_detail::mxfp8_direct_tile(path, widening));
    for (int64_t M : {1, 3, 40}) {
      std::mt19937 rng{unsigned(M) + 100};
      std::normal_distribution<float> nd;
      std::vector<float> x(size_t(M * K)), y(size_t(M * N)), want(y.size());
      for (auto& v : x) v = nd(rng) * 1e-30f;  // keeps row 9's products finite
      fk(path, pool, x.data(), nullptr, M, f, want.data());
      for (size_t t = 0; t <= forced_tiles.size(); ++t) {
        const bool forced = t > 0;
        if (forced && M > 3) continue;
        std::fill(y.begin(), y.end(), 0.0f);
        if (forced) {
          matmul_detail::MatmulPlan p = matmul_detail::default_matmul_plan(path, M, N, K);
          p.blocked = false;
          p.blocked_tile = forced_tiles[t - 1].second;
          matmul_detail::matmul_run(path, p, pool, x.data(), nullptr, M, m.w, y.data());
        } else {
          mk(path, pool, x.data(), nullptr, M, m.w, y.data());
        }
        const std::string what = std::string(cpu_path_name(path)) + (forced ? forced_tiles[t - 1].first : "");
        for (int64_t i = 0; i < M; ++i)
          for (int64_t n = 0; n < N; ++n) {
            const float got = y[size_t(i * N + n)], exp = want[size_t(i * N + n)];
            if (n >= 5 && n <= 7) {
              EXPECT_TRUE(std::isnan(got)) << what << " M=" << M << " row " << n;
              continue;
            }
            ASSERT_FALSE(std::isnan(exp)) << n;
            uint32_t a, b;
            std::memcpy(&a, &got, 4);
            std::memcpy(&b, &exp, 4);
            ASSERT_EQ(a, b) << what << " M=" << M << " row " << n;
          }
      }
    }
  }
}
