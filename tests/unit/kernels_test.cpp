// Fast kernels against their plain references on random inputs, including awkward sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/activations.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/vec_ops.h"

using namespace m3;

namespace {

std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> to_bytes(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) std::memcpy(out.data() + 4 * i, &v[i], 4);
    else {
      uint16_t h = t == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

}  // namespace

TEST(Matmul, MatchesReferenceForEveryDtypeAndAwkwardShapes) {
  std::mt19937 rng(1);
  ThreadPool pool(3);
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, {1, 33, 17}, {7, 65, 129}, {5, 130, 300}}) {
      auto x = random_vec(rng, size_t(M * K));
      auto wf = random_vec(rng, size_t(N * K), 0.1f);
      auto wb = to_bytes(wf, t);
      LinearWeight w = dense_weight(t, wb.data(), N, K);
      std::vector<float> y(size_t(M * N)), yr(size_t(M * N));
      matmul(pool, x.data(), M, w, y.data());
      matmul_ref(x.data(), M, w, yr.data());
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], yr[i], 1e-4f * (1.0f + std::fabs(yr[i]))) << i;
    }
}

TEST(Matmul, GatherPicksTheRequestedRows) {
  std::mt19937 rng(2);
  ThreadPool pool(2);
  const int M = 6, N = 9, K = 20;
  auto x = random_vec(rng, size_t(M * K));
  auto wf = random_vec(rng, size_t(N * K));
  LinearWeight w = dense_weight(DType::F32, reinterpret_cast<const uint8_t*>(wf.data()), N, K);
  std::vector<int32_t> rows = {4, 0, 4};
  std::vector<float> y(rows.size() * N), full(size_t(M * N));
  matmul_gather(pool, x.data(), rows.data(), int64_t(rows.size()), w, y.data());
  matmul(pool, x.data(), M, w, full.data());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int n = 0; n < N; ++n) EXPECT_EQ(y[i * N + n], full[size_t(rows[i]) * N + n]);
}

TEST(Matmul, ResultIsIdenticalForAnyThreadCount) {
  std::mt19937 rng(3);
  const int M = 4, N = 77, K = 130;
  auto x = random_vec(rng, size_t(M * K));
  auto wb = to_bytes(random_vec(rng, size_t(N * K)), DType::BF16);
  LinearWeight w = dense_weight(DType::BF16, wb.data(), N, K);
  std::vector<float> y1(size_t(M * N)), y3(size_t(M * N));
  ThreadPool p1(1), p3(3);
  matmul(p1, x.data(), M, w, y1.data());
  matmul(p3, x.data(), M, w, y3.data());
  EXPECT_EQ(y1, y3);
}

TEST(GemmaNorm, MatchesFormula) {
  std::mt19937 rng(4);
  const int R = 3, n = 37;
  auto x = random_vec(rng, R * n, 3.0f);
  auto w = random_vec(rng, n, 0.1f);
  std::vector<float> scale(n), y(R * n);
  for (int i = 0; i < n; ++i) scale[i] = 1.0f + w[i];
  gemma_rmsnorm(x.data(), scale.data(), R, n, 1e-6, y.data());
  for (int r = 0; r < R; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[r * n + i], x[r * n + i] * inv * (1.0 + w[i]), 1e-5);
  }
}

TEST(Rope, RotatesPairsAndPassesTheRestThrough) {
  // head_dim 8, rotary 4: pairs (0,2), (1,3); dims 4..7 unchanged.
  RopeTable rope(10000.0, 4);
  const int64_t pos[] = {0, 5, 1000000};
  rope.build(pos, 3);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
    rope.apply(v.data(), i, 1, 8);
    for (int j = 0; j < 2; ++j) {
      const double a = double(pos[i]) * std::pow(10000.0, -2.0 * j / 4);
      const double x0 = 1 + j, x1 = 3 + j;
      EXPECT_NEAR(v[j], x0 * std::cos(a) - x1 * std::sin(a), 1e-5);
      EXPECT_NEAR(v[j + 2], x1 * std::cos(a) + x0 * std::sin(a), 1e-5);
    }
    for (int d = 4; d < 8; ++d) EXPECT_EQ(v[d], float(d + 1));
  }
}

TEST(SwigluOai, ClampsGateAboveAndUpBothWays) {
  const float gate[] = {-10.0f, 0.5f, 9.0f, 2.0f};
  const float up[] = {0.0f, -9.0f, 1.0f, 8.0f};
  float out[4];
  swigluoai(gate, up, 4, 1.702f, 7.0f, out);
  auto ref = [](double g, double u) {
    g = std::min(g, 7.0);
    u = std::clamp(u, -7.0, 7.0);
    return g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
  };
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], ref(gate[i], up[i]), 1e-5);
  EXPECT_LT(out[0], 0.0f);  // no lower clamp on the gate: a very negative gate still passes a small value
}

TEST(ThreadPool, CoversTheRangeOnceAndRethrows) {
  ThreadPool pool(4);
  std::vector<int> hits(1000, 0);
  pool.parallel_for(1000, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) hits[size_t(i)]++;
  });
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t a, int64_t) {
    if (a == 0) throw std::runtime_error("boom");
  }), std::runtime_error);
  pool.parallel_for(3, [&](int64_t, int64_t) {});  // still usable
}

TEST(Dtype, Conversions) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // halfway rounds to even
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.333251953125f)), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

// The training ops' vector primitives (kernels/vec_ops.h) on every path this machine runs, at
// lengths around the vector widths, against a double-precision loop.
TEST(VecOps, DotAndAxpyMatchPlainLoopsOnEveryPath) {
  for (m3::CpuPath path : {m3::CpuPath::Generic, m3::CpuPath::Avx2, m3::CpuPath::Avx512, m3::CpuPath::Neon,
                           m3::CpuPath::Sve}) {
    if (!m3::cpu_path_supported(path)) continue;
    const m3::VecOps& ops = m3::vec_ops_at(path);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 128, 257}) {
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      for (auto& v : a) v = u(rng);
      for (auto& v : b) v = u(rng);
      double ref = 0.0;
      for (int64_t i = 0; i < n; ++i) ref += double(a[size_t(i)]) * double(b[size_t(i)]);
      EXPECT_NEAR(ops.dot(a.data(), b.data(), n), ref, 1e-5 * (1.0 + double(n))) << m3::cpu_path_name(path) << " n " << n;
      std::vector<float> y = b;
      ops.axpy(0.75f, a.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(y[size_t(i)], double(b[size_t(i)]) + 0.75 * double(a[size_t(i)]), 1e-6) << m3::cpu_path_name(path);
    }
  }
}

// The per-row kernels (kernels/elementwise.h) on every path this machine runs, at lengths around
// the vector widths: RMSNorm and the rotation give the generic path's bits (the rotation where the
// build does not fuse the generic path's products), SwiGLU-OAI its value within a few ulp (vector
// exp against libm's) and the same bits on every SIMD path; all against double precision.
TEST(Elementwise, EveryPathMatchesTheGenericPathAndDoublePrecision) {
  const m3::ElementwiseKernels& generic = m3::elementwise_kernels_at(m3::CpuPath::Generic);
  const m3::ElementwiseKernels* first_simd = nullptr;
  for (m3::CpuPath path : {m3::CpuPath::Avx2, m3::CpuPath::Avx512, m3::CpuPath::Neon, m3::CpuPath::Sve}) {
    if (!m3::cpu_path_supported(path)) continue;
    const m3::ElementwiseKernels& k = m3::elementwise_kernels_at(path);
    const char* name = m3::cpu_path_name(path);
    std::mt19937 rng(6);
    for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 33, 64, 100, 257, 3072, 6150}) {
      SCOPED_TRACE(std::string(name) + " n " + std::to_string(n));
      const int64_t rows = 3;
      const auto x = random_vec(rng, size_t(rows * n), 4.0f);
      auto scale = random_vec(rng, size_t(n), 0.2f);
      for (float& s : scale) s += 1.0f;
      std::vector<float> want(x.size()), got(x.size());
      generic.rmsnorm(x.data(), scale.data(), rows, n, 1e-6, want.data());
      k.rmsnorm(x.data(), scale.data(), rows, n, 1e-6, got.data());
      EXPECT_EQ(got, want);
      for (int64_t r = 0; r < rows; ++r) {
        long double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += (long double)x[size_t(r * n + i)] * x[size_t(r * n + i)];
        EXPECT_NEAR(double(m3::sum_of_squares_reference(x.data() + r * n, n)), double(ss), 1e-14 * double(ss));
        const double inv = 1.0 / std::sqrt(double(ss) / double(n) + 1e-6);
        for (int64_t i = 0; i < n; i += 7)
          EXPECT_NEAR(got[size_t(r * n + i)], x[size_t(r * n + i)] * inv * scale[size_t(i)],
                      1e-6 * (1.0 + std::fabs(x[size_t(r * n + i)] * inv)));
      }

      // LayerNorm on rows with a mean far above their spread (the variance's hard case) and on
      // centred ones: every path gives the generic path's bits, which are the float64 formula's.
      for (float offset : {0.0f, 300.0f}) {
        auto xs = x;
        for (float& v : xs) v += offset;
        const auto bias = random_vec(rng, size_t(n), 0.5f);
        std::vector<float> l_want(xs.size()), l_got(xs.size());
        generic.layernorm(xs.data(), scale.data(), bias.data(), rows, n, 1e-5, l_want.data());
        k.layernorm(xs.data(), scale.data(), bias.data(), rows, n, 1e-5, l_got.data());
#ifndef FP_FAST_FMAF  // a build that fuses the generic path's products rounds them differently
        EXPECT_EQ(l_got, l_want);
#endif
        for (int64_t r = 0; r < rows; ++r) {
          long double sum = 0, sq = 0;
          for (int64_t i = 0; i < n; ++i) sum += xs[size_t(r * n + i)];
          const long double mean = sum / n;
          for (int64_t i = 0; i < n; ++i) sq += (xs[size_t(r * n + i)] - mean) * (xs[size_t(r * n + i)] - mean);
          double m = 0, v = 0;
          m3::layer_norm_moments_reference(xs.data() + r * n, n, m, v);
          EXPECT_NEAR(m, double(mean), 1e-14 * (1.0 + std::fabs(double(mean))));
          EXPECT_NEAR(v, double(sq / n), 1e-12 * (1.0 + double(mean * mean)));
          const double inv = 1.0 / std::sqrt(double(sq / n) + 1e-5);
          for (int64_t i = 0; i < n; i += 7) {
            const double z = (xs[size_t(r * n + i)] - double(mean)) * inv;
            // fp32 holds the mean to half an ulp (6e-8 relative), which the scaling multiplies by inv.
            EXPECT_NEAR(l_got[size_t(r * n + i)], z * scale[size_t(i)] + bias[size_t(i)],
                        2e-6 * (1.0 + std::fabs(z)) + 1.5 * 6e-8 * std::fabs(double(mean)) * inv);
          }
        }
      }

      // SwiGLU-OAI over gates well past both clamps (and past exp's range), in place as the MoE calls it.
      const auto gate = random_vec(rng, size_t(n), 30.0f), up = random_vec(rng, size_t(n), 5.0f);
      std::vector<float> g_want(static_cast<size_t>(n)), g_got = gate;
      generic.swigluoai(gate.data(), up.data(), n, 1.702f, 7.0f, g_want.data());
      k.swigluoai(g_got.data(), up.data(), n, 1.702f, 7.0f, g_got.data());
      for (int64_t i = 0; i < n; ++i) {
        const double g = std::min(double(gate[size_t(i)]), 7.0), u = std::clamp(double(up[size_t(i)]), -7.0, 7.0);
        const double ref = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
        // fp32's alpha·g carries a relative error of 6e-8, which exp turns into |alpha·g|·6e-8.
        EXPECT_NEAR(g_got[size_t(i)], ref, 1e-6 * (1.0 + 1.702 * std::fabs(g)) * std::fabs(ref) + 1e-30)
            << "gate " << gate[size_t(i)];
        EXPECT_NEAR(g_got[size_t(i)], g_want[size_t(i)], 1e-6 * std::fabs(g_want[size_t(i)]) + 1e-30)
            << "gate " << gate[size_t(i)];
      }
      if (first_simd != nullptr && n <= 257) {
        std::vector<float> other(static_cast<size_t>(n));
        first_simd->swigluoai(gate.data(), up.data(), n, 1.702f, 7.0f, other.data());
        EXPECT_EQ(other, g_got) << "SIMD paths disagree";
      }

      // The rotation: heads of head_dim 2·half + 6 (6 dims pass through).
      const int half = int(std::min<int64_t>(n, 100)), head_dim = 2 * half + 6, heads = 3;
      const auto v = random_vec(rng, size_t(heads * head_dim));
      const auto c = random_vec(rng, size_t(half)), s = random_vec(rng, size_t(half));
      std::vector<float> r_want = v, r_got = v;
      generic.rope_rotate(r_want.data(), c.data(), s.data(), half, heads, head_dim);
      k.rope_rotate(r_got.data(), c.data(), s.data(), half, heads, head_dim);
#ifndef FP_FAST_FMAF  // a build that fuses the generic path's products rounds them differently
      EXPECT_EQ(r_got, r_want);
#endif
      for (int h = 0; h < heads; ++h)
        for (int j = 0; j < head_dim; ++j) {
          const size_t at = size_t(h * head_dim + j);
          const double a = v[size_t(h * head_dim + (j < half ? j : j - half))];
          const double b = v[size_t(h * head_dim + (j < half ? j + half : j))];
          const double ref = j < half ? a * c[size_t(j)] - b * s[size_t(j)]
                             : j < 2 * half ? b * c[size_t(j - half)] + a * s[size_t(j - half)]
                                            : double(v[at]);
          EXPECT_NEAR(r_got[at], ref, 1e-5);
        }
    }
    if (first_simd == nullptr) first_simd = &k;
  }
}
