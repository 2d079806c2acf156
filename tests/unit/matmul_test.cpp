// matmul on every kernel path this CPU runs, against the float64 reference, and the invariances
// the model relies on: a row's result does not change with the batch size, the other rows, the
// thread count, the blocking or gathering (chunked prefill == one-shot prefill == decode).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/matmul_tile.h"

using namespace m3;
using matmul_detail::MatmulPlan;

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
    if (t == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<CpuPath> supported_paths() {
  std::vector<CpuPath> paths;
  for (CpuPath p : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve})
    if (cpu_path_supported(p)) paths.push_back(p);
  return paths;
}

// A weight matrix with its own storage, exactly N*K elements long (ASan sees any read past it).
struct TestWeights {
  std::vector<uint8_t> bytes;
  LinearWeight w;
  TestWeights(std::mt19937& rng, DType t, int64_t N, int64_t K)
      : bytes(to_bytes(random_vec(rng, size_t(N * K), 0.1f), t)), w(dense_weight(t, bytes.data(), N, K)) {}
};

std::vector<float> run(CpuPath path, ThreadPool& pool, const std::vector<float>& x, int64_t M, const LinearWeight& w,
                       const MatmulPlan* plan = nullptr, const int32_t* rows = nullptr) {
  std::vector<float> y(size_t(M * w.rows), std::numeric_limits<float>::quiet_NaN());
  const MatmulPlan p = plan ? *plan : matmul_detail::default_matmul_plan(path, M, w.rows, w.cols);
  matmul_detail::matmul_run(path, p, pool, x.data(), rows, M, w, y.data());
  return y;
}

// Plans that cut the work into many small blocks, to check that blocking changes no bit.
std::vector<MatmulPlan> plans() {
  std::vector<MatmulPlan> out;
  MatmulPlan p;
  p.blocked = false;
  for (int streams : {1, 3, 8}) {
    p.streams = streams;
    out.push_back(p);  // direct tiles over all of K, rows taken from `streams` runs
  }
  p.blocked = true;  // panel tiles
  p.mc = 8;
  p.nc = 12;
  p.kc_blocks = 1;
  p.m_chunk = 5;
  p.weights_outer = false;
  out.push_back(p);  // every block saved and resumed
  p.weights_outer = true;
  out.push_back(p);
  p.mc = 64;
  p.nc = 48;
  p.kc_blocks = 3;
  p.m_chunk = 0;
  out.push_back(p);
  p.weights_outer = false;
  out.push_back(p);
  return out;
}

std::string label(CpuPath path, DType t, int64_t M, int64_t N, int64_t K) {
  return std::string(cpu_path_name(path)) + " " + std::string(dtype_name(t)) + " M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

const DType kDtypes[] = {DType::BF16, DType::F16, DType::F32};

}  // namespace

TEST(Matmul, ReportsItsKernel) {
  const std::string name = matmul_kernel_name();
  ASSERT_TRUE(parse_cpu_path(name).has_value()) << name;
  EXPECT_TRUE(cpu_path_within(*parse_cpu_path(name), cpu_active_path())) << name;
  EXPECT_TRUE(cpu_path_supported(cpu_active_path()));
  EXPECT_EQ(parse_cpu_path("avx2"), CpuPath::Avx2);
  EXPECT_FALSE(parse_cpu_path("sse9").has_value());
  std::printf("matmul kernels here: %s (best %s)\n", name.c_str(), cpu_path_name(cpu_best_path()));
}

// Decode's direct tiles ask for weights a distance ahead that suits the L1 data cache (1 KiB where
// it holds 48 KiB or more, else 512 B): on x86 Linux the size must be found, not left unknown.
TEST(Matmul, DecodePrefetchFollowsTheL1DataCache) {
  const int l1d = cpu_features().l1d_bytes;
#if defined(__x86_64__) && defined(__linux__)
  EXPECT_GE(l1d, 16 << 10);
  EXPECT_LE(l1d, 1 << 20);
#endif
  EXPECT_EQ(matmul_detail::direct_tile_prefetch_bytes(), l1d >= (48 << 10) ? 1024 : 512);
  std::printf("L1 data cache here: %d KiB; direct tiles ask %d bytes ahead\n", l1d >> 10,
              matmul_detail::direct_tile_prefetch_bytes());
}

TEST(Matmul, EveryPathMatchesTheReference) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  const std::tuple<int64_t, int64_t> shapes[] = {{1, 1}, {7, 17}, {37, 31}, {20, 33}, {45, 100}, {13, 300}, {70, 1057}};
  for (CpuPath path : supported_paths())
    for (DType t : kDtypes)
      for (auto [N, K] : shapes) {
        TestWeights tw(rng, t, N, K);
        for (int64_t M : {1, 2, 3, 5, 16, 33, 64}) {
          if (K > 300 && M > 16 && path == CpuPath::Generic) continue;  // slow path, fewer sizes
          const auto x = random_vec(rng, size_t(M * K));
          std::vector<float> yr(size_t(M * N));
          matmul_ref(x.data(), M, tw.w, yr.data());
          // fp32 sums of K products in 16 lanes: error within ~(K/16 + 8) ulps of sum |x·w|
          // (computed once for every plan: qemu runs this test slowly).
          std::vector<double> tol(yr.size());
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double mag = 0;
              for (int64_t k = 0; k < K; ++k) mag += std::fabs(double(x[size_t(m * K + k)]) * tw.w.at(n, k));
              tol[size_t(m * N + n)] = (double(K) / 16 + 8) * 1.2e-7 * mag + 1e-30;
            }
          for (const MatmulPlan& plan : plans()) {
            const auto y = run(path, pool, x, M, tw.w, &plan);
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                const size_t i = size_t(m * N + n);
                ASSERT_NEAR(y[i], yr[i], tol[i]) << label(path, t, M, N, K) << " m=" << m << " n=" << n;
              }
          }
        }
      }
}

TEST(Matmul, RowResultDoesNotDependOnBatchThreadsOrBlocking) {
  std::mt19937 rng(12);
  ThreadPool p1(1), p2(2), p3(3);
  for (CpuPath path : supported_paths())
    for (DType t : kDtypes)
      for (auto [N, K] : {std::tuple<int64_t, int64_t>{53, 1100}, {97, 64}, {30, 700}}) {
        TestWeights tw(rng, t, N, K);
        const int64_t M = 64;
        const auto x = random_vec(rng, size_t(M * K));
        const auto want = run(path, p1, x, M, tw.w);
        const std::string where = label(path, t, M, N, K);
        // Thread counts, and every plan, on the whole batch.
        EXPECT_EQ(run(path, p2, x, M, tw.w), want) << where << " 2 threads";
        EXPECT_EQ(run(path, p3, x, M, tw.w), want) << where << " 3 threads";
        for (const MatmulPlan& plan : plans()) EXPECT_EQ(run(path, p3, x, M, tw.w, &plan), want) << where << " plan";
        // The batch cut into chunks of awkward sizes (chunked prefill), and row by row (decode).
        for (int64_t chunk : {1, 2, 3, 5, 16, 33}) {
          for (int64_t m0 = 0; m0 < M; m0 += chunk) {
            const int64_t rows = std::min(chunk, M - m0);
            const std::vector<float> xs(x.begin() + m0 * K, x.begin() + (m0 + rows) * K);
            const auto y = run(path, chunk == 5 ? p1 : p2, xs, rows, tw.w);
            for (int64_t i = 0; i < rows * N; ++i)
              ASSERT_EQ(y[size_t(i)], want[size_t(m0 * N + i)]) << where << " chunk " << chunk << " at row " << m0;
          }
        }
      }
}

TEST(Matmul, SimdPathsAgreeBitForBit) {
  // Every SIMD path runs the lane order of matmul_tile.h with fused multiply-adds: AVX2 keeps the 16
  // lanes of AVX-512 in two registers (direct tiles) or runs them 8 at a time (its Highway panel
  // tiles), NEON and SVE 4, 8 or 16 at a time. Same FMAs per lane, same order, same bits.
  std::vector<CpuPath> simd;
  for (CpuPath p : supported_paths())
    if (p != CpuPath::Generic) simd.push_back(p);
  if (simd.size() < 2) GTEST_SKIP() << "one SIMD path here";
  std::mt19937 rng(13);
  ThreadPool pool(2);
  for (DType t : kDtypes)
    for (auto [M, N, K] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 40, 4096}, {5, 33, 77}, {64, 50, 1030}, {70, 13, 2100}}) {
      TestWeights tw(rng, t, N, K);
      const auto x = random_vec(rng, size_t(M * K));
      const CpuPath best = simd.back();
      const auto want = run(best, pool, x, M, tw.w);
      for (CpuPath p : simd) {
        if (p == best) continue;
        EXPECT_EQ(run(p, pool, x, M, tw.w), want) << label(p, t, M, N, K) << " against " << cpu_path_name(best);
      }
#ifdef FP_FAST_FMAF  // the generic path fuses its multiply-adds only when the build targets FMA
      EXPECT_EQ(run(CpuPath::Generic, pool, x, M, tw.w), want) << label(CpuPath::Generic, t, M, N, K);
#endif
    }
}

TEST(Matmul, GatherEqualsTheSameRowsComputedDirectly) {
  std::mt19937 rng(14);
  ThreadPool pool(2);
  for (CpuPath path : supported_paths())
    for (DType t : kDtypes) {
      const int64_t M = 40, N = 37, K = 333;
      TestWeights tw(rng, t, N, K);
      const auto x = random_vec(rng, size_t(M * K));
      const std::vector<int32_t> rows = {39, 0, 4, 4, 17, 2, 38, 11, 5};
      const auto full = run(path, pool, x, M, tw.w);
      const auto y = run(path, pool, x, int64_t(rows.size()), tw.w, nullptr, rows.data());
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(y[i * N + size_t(n)], full[size_t(rows[i]) * N + size_t(n)]) << label(path, t, M, N, K);
      // And through the public entry point.
      std::vector<float> yp(rows.size() * N), fp(size_t(M * N));
      matmul_gather(pool, x.data(), rows.data(), int64_t(rows.size()), tw.w, yp.data());
      matmul(pool, x.data(), M, tw.w, fp.data());
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t n = 0; n < N; ++n) ASSERT_EQ(yp[i * N + size_t(n)], fp[size_t(rows[i]) * N + size_t(n)]);
    }
}

TEST(Matmul, SeveralWeightsAgainstOneXGiveEachWeightsOwnBits) {
  // matmul_many packs x once and makes one pass of the pool over every weight's rows (a layer's q,
  // k, v and index projections; an expert's gate and up): each output must be what its own call
  // gives, bit for bit, on every path, plan, batch size (300: two chunks of 256 rows), with rows
  // gathered or not, ranges of the pool spanning two weights.
  std::mt19937 rng(15);
  ThreadPool pool(3);
  const int64_t K = 200;
  const std::vector<int32_t> gather = {7, 0, 3, 3, 12, 1, 9};
  for (CpuPath path : supported_paths())
    for (DType t : kDtypes) {
      std::vector<TestWeights> ws;
      for (int64_t N : {37, 8, 20}) ws.emplace_back(rng, t, N, K);
      for (int64_t M : {1, 5, 40, 300})
        for (bool gathered : {false, true}) {
          if (gathered && M > 13) continue;  // the gather list indexes rows 0..12
          const int64_t rows_out = gathered ? int64_t(gather.size()) : M;
          const int32_t* rows = gathered ? gather.data() : nullptr;
          const auto x = random_vec(rng, size_t(std::max<int64_t>(M, 13) * K));
          std::vector<MatmulPlan> ps = {matmul_detail::default_matmul_plan(path, rows_out, 1, K)};
          if (M <= 40) for (const MatmulPlan& p : plans()) ps.push_back(p);
          for (const MatmulPlan& p : ps) {
            std::vector<std::vector<float>> ys;
            std::vector<MatmulTarget> targets;
            for (const TestWeights& tw : ws) ys.emplace_back(size_t(rows_out * tw.w.rows), std::nanf(""));
            for (size_t i = 0; i < ws.size(); ++i) targets.push_back({&ws[i].w, ys[i].data()});
            matmul_detail::matmul_run_many(path, p, pool, x.data(), rows, rows_out, targets);
            for (size_t i = 0; i < ws.size(); ++i) {
              const auto want = run(path, pool, x, rows_out, ws[i].w, &p, rows);
              ASSERT_EQ(std::memcmp(ys[i].data(), want.data(), want.size() * sizeof(float)), 0)
                  << label(path, t, rows_out, ws[i].w.rows, K) << " weight " << i << (gathered ? " gathered" : "");
              // And every output written, near the float64 reference (the single call shares the code).
              std::vector<float> xr(size_t(rows_out * K));
              for (int64_t r = 0; r < rows_out; ++r)
                std::memcpy(xr.data() + r * K, x.data() + (rows ? rows[r] : r) * K, size_t(K) * sizeof(float));
              std::vector<float> ref(want.size());
              matmul_ref(xr.data(), rows_out, ws[i].w, ref.data());
              for (size_t j = 0; j < ref.size(); ++j)
                ASSERT_NEAR(ys[i][j], ref[j], 1e-4) << label(path, t, rows_out, ws[i].w.rows, K) << " weight " << i;
            }
          }
        }
    }
  // The public entry point on the active path: the same format together, mixed formats one by one.
  TestWeights a(rng, DType::BF16, 30, K), b(rng, DType::BF16, 9, K), c(rng, DType::F32, 11, K);
  const auto x = random_vec(rng, size_t(50 * K));
  for (const std::vector<const TestWeights*>& set : {std::vector<const TestWeights*>{&a, &b},
                                                      std::vector<const TestWeights*>{&a, &c, &b}}) {
    std::vector<std::vector<float>> ys;
    std::vector<MatmulTarget> targets;
    for (const TestWeights* tw : set) ys.emplace_back(size_t(50 * tw->w.rows));
    for (size_t i = 0; i < set.size(); ++i) targets.push_back({&set[i]->w, ys[i].data()});
    matmul_many(pool, x.data(), nullptr, 50, targets);
    for (size_t i = 0; i < set.size(); ++i) {
      std::vector<float> want(size_t(50 * set[i]->w.rows));
      matmul(pool, x.data(), 50, set[i]->w, want.data());
      EXPECT_EQ(ys[i], want) << "weight " << i << " of " << set.size();
    }
  }
}

TEST(Matmul, NeverReadsPastARow) {
  // Row 1 is all infinities: if a row-0 tail read spilled into it, y[:, 0] would not be finite.
  ThreadPool pool(1);
  for (CpuPath path : supported_paths())
    for (DType t : kDtypes)
      for (int64_t K : {1, 17, 33, 47}) {
        std::vector<float> wf(size_t(2 * K), 0.5f);
        for (int64_t k = K; k < 2 * K; ++k) wf[size_t(k)] = std::numeric_limits<float>::infinity();
        const auto bytes = to_bytes(wf, t);
        const LinearWeight w = dense_weight(t, bytes.data(), 2, K);
        const std::vector<float> x(size_t(3 * K), 1.0f);
        const auto y = run(path, pool, x, 3, w);
        for (int m = 0; m < 3; ++m) {
          EXPECT_EQ(y[size_t(m * 2)], 0.5f * float(K)) << label(path, t, 3, 2, K);
          EXPECT_TRUE(std::isinf(y[size_t(m * 2 + 1)]));
        }
      }
}

TEST(Matmul, EmptyShapes) {
  ThreadPool pool(2);
  std::vector<uint8_t> bytes(64, 0);
  for (CpuPath path : supported_paths()) {
    const LinearWeight none = dense_weight(DType::BF16, bytes.data(), 3, 0);  // K = 0: every output is 0
    std::vector<float> x(1, 1.0f);
    const auto y = run(path, pool, x, 2, none);
    for (float v : y) EXPECT_EQ(v, 0.0f);
    const LinearWeight w = dense_weight(DType::BF16, bytes.data(), 2, 4);
    EXPECT_NO_THROW(matmul_detail::matmul_run(path, matmul_detail::default_matmul_plan(path, 0, 2, 4), pool,
                                              x.data(), nullptr, 0, w, nullptr));
  }
}
