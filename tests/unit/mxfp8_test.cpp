// The official MXFP8 layout (format/weight_format.h, docs/FORMATS.md): F8_E4M3 weights with one
// UE8M0 exponent per 1x32 block in "<module>.weight_scale_inv". Its matmul on every CPU path this
// machine runs equals, bit for bit, the f32 matmul of the exactly dequantized weights (same lane
// order), for every batch size; a checkpoint storing some linears as MXFP8 gives the same logits as
// one storing the dequantized values as F32; and the dequantization itself follows the OCP rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "m3/error.h"
#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "fixtures/random_checkpoint.h"
#include "format/linear_weight.h"
#include "format/mxfp8_quantize.h"
#include "format/weight_format.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "kernels/matmul_tile.h"
#include "runtime/engine.h"

using namespace m3;

namespace {

// A random MXFP8 weight: e4m3 bytes (NaN codes excluded) and scales 2^-10 .. 2^5.
struct RandomMxfp8 {
  std::vector<uint8_t> q, scales;
  LinearWeight w;
  RandomMxfp8(int64_t rows, int64_t cols, uint64_t seed) : q(size_t(rows * cols)), scales(size_t(rows * cols / 32)) {
    std::mt19937_64 rng(seed);
    for (auto& b : q) {
      do b = uint8_t(rng()); while ((b & 0x7f) == 0x7f);
    }
    for (auto& s : scales) s = uint8_t(117 + rng() % 16);
    w.format = &mxfp8_format();
    w.data = q.data();
    w.side[0] = scales.data();
    w.rows = rows;
    w.cols = cols;
  }
};

std::vector<float> dequantized(const LinearWeight& w) {
  std::vector<float> d(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) w.row_to_f32(r, d.data() + r * w.cols);
  return d;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST(Mxfp8, DequantizationFollowsTheOcpRules) {
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

TEST(Mxfp8, ScaleBytesDecodeToExactPowersOfTwo) {
  for (int s = 0; s < 255; ++s) EXPECT_EQ(ue8m0_to_f32(uint8_t(s)), std::ldexp(1.0f, s - 127)) << s;
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(255)));
}

// The SIMD panel fills widen every E4M3 code (subnormals, both zeros, NaN, 448) under extreme
// scales exactly as the scalar tables do.
TEST(Mxfp8, SimdPanelFillEqualsTheScalarDequantizationForEveryCodeAndScale) {
  const int64_t rows = 3, cols = 256;
  RandomMxfp8 m(rows, cols, 5);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) m.q[size_t(r * cols + c)] = uint8_t((c + 37 * r) % 256);
  const uint8_t scales[] = {0, 1, 100, 126, 127, 128, 200, 254, 255};
  for (CpuPath path : {CpuPath::Avx2, CpuPath::Avx512}) {
    if (!cpu_path_supported(path)) continue;
    const matmul_detail::PanelFill fill = matmul_detail::mxfp8_panel_fill(path);
    ASSERT_NE(fill, nullptr) << cpu_path_name(path);
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
            EXPECT_TRUE(std::isnan(got)) << cpu_path_name(path);
          } else {
            uint32_t a, b;
            std::memcpy(&a, &got, 4);
            std::memcpy(&b, &exp, 4);
            ASSERT_EQ(a, b) << cpu_path_name(path) << " code " << int(m.q[size_t(r * cols + c)]) << " scale " << int(s);
          }
        }
      }
    }
  }
}

TEST(Mxfp8, MatmulEqualsTheF32MatmulOfTheDequantizedWeightsOnEveryPath) {
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
// when one was seen; scales past 2^119 take two multiplies. Rows holding either must still give
// what the f32 matmul of the dequantized weights gives, at every M (direct tiles and panels), and
// the rows beside them in the same tile must not change.
TEST(Mxfp8, NanCodesAndHugeScalesGiveTheDequantizedResultInEveryTile) {
  ThreadPool pool(2);
  const int64_t N = 40, K = 1024;  // 32 blocks: two chunks of block factors per row
  RandomMxfp8 m(N, K, 11);
  m.q[size_t(5 * K + 700)] = 0x7f;  // row 5: a NaN code in the second chunk
  m.q[size_t(6 * K + 3)] = 0xff;    // row 6: a negative NaN code in the first block
  for (int64_t b = 0; b < K / 32; b += 3) m.scales[size_t(9 * (K / 32) + b)] = uint8_t(247 + b % 8);  // row 9
  for (int64_t c = 0; c < K; ++c)  // row 9's values small enough that huge scales stay finite
    if (m.scales[size_t(9 * (K / 32) + c / 32)] >= 247) m.q[size_t(9 * K + c)] &= 0x87;
  const std::vector<float> d = dequantized(m.w);
  const LinearWeight f = dense_weight(DType::F32, d.data(), N, K);
  for (CpuPath path : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!cpu_path_supported(path)) continue;
    const MatmulKernel mk = find_matmul_kernel(mxfp8_format(), path), fk = find_matmul_kernel(f32_format(), path);
    for (int64_t M : {1, 3, 40}) {
      std::mt19937 rng{unsigned(M) + 100};
      std::normal_distribution<float> nd;
      std::vector<float> x(size_t(M * K)), y(size_t(M * N)), want(y.size());
      for (auto& v : x) v = nd(rng) * 1e-30f;  // keeps row 9's products finite
      mk(path, pool, x.data(), nullptr, M, m.w, y.data());
      fk(path, pool, x.data(), nullptr, M, f, want.data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < N; ++n) {
          const float got = y[size_t(i * N + n)], exp = want[size_t(i * N + n)];
          if (n == 5 || n == 6) {
            EXPECT_TRUE(std::isnan(got)) << cpu_path_name(path) << " M=" << M << " row " << n;
            continue;
          }
          ASSERT_FALSE(std::isnan(exp)) << n;
          uint32_t a, b;
          std::memcpy(&a, &got, 4);
          std::memcpy(&b, &exp, 4);
          ASSERT_EQ(a, b) << cpu_path_name(path) << " M=" << M << " row " << n;
        }
    }
  }
}

TEST(Mxfp8, ACheckpointInTheReleaseLayoutGivesTheLogitsOfItsDequantizedValues) {
  const std::string root = testing::TempDir() + "/m3_mxfp8_" + std::to_string(getpid());
  const std::string base = root + "/base", mx = root + "/mxfp8", f32 = root + "/f32";
  std::filesystem::remove_all(root);
  RandomCheckpointOptions o;
  o.preset = "tiny";
  o.seed = 33;
  o.out_dir = base;
  make_random_checkpoint(o);
  const std::set<std::string> quantized = {
      "language_model.model.layers.0.mlp.gate_proj.weight",
      "language_model.model.layers.0.self_attn.o_proj.weight",
      "language_model.model.layers.1.self_attn.q_proj.weight",
      "language_model.model.layers.2.block_sparse_moe.experts.1.w1.weight",
  };
  const TensorStore store = TensorStore::open_dir(base);
  std::vector<TensorData> as_mx, as_f32;
  uint64_t seed = 3;
  for (const std::string& name : store.names()) {
    const TensorView& t = store.get(name);
    if (!quantized.count(name)) {
      TensorData d{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
      as_mx.push_back(d);
      as_f32.push_back(std::move(d));
      continue;
    }
    RandomMxfp8 m(t.shape[0], t.shape[1], seed++);
    for (auto& s : m.scales) s = uint8_t(112 + (s - 117) % 4);  // small weights, as a trained model has
    const std::string module = name.substr(0, name.size() - std::string("weight").size());
    as_mx.push_back({name, DType::F8_E4M3, t.shape, m.q});
    as_mx.push_back({module + "weight_scale_inv", DType::U8, {t.shape[0], t.shape[1] / 32}, m.scales});
    as_f32.push_back({name, DType::F32, t.shape, bytes_of(dequantized(m.w))});
  }
  for (const auto& [dir, tensors] : {std::pair{mx, &as_mx}, std::pair{f32, &as_f32}}) {
    std::filesystem::create_directories(dir);
    for (const char* f : {"config.json", "tokenizer.json"}) std::filesystem::copy_file(base + "/" + f, dir + "/" + f);
    write_checkpoint_tensors(dir, *tensors, UINT64_MAX);
  }
  auto logits = [](const std::string& dir) {
    auto engine = Engine::load(dir, 2);
    std::vector<int32_t> ids(140);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 29 + 5) % size_t(engine->tokenizer().vocab_size()));
    KvCache cache(engine->model().cache_shape());
    std::vector<float> out;
    engine->model().forward(cache, ids.data(), int64_t(ids.size()), LogitsFor::All, out);
    return out;
  };
  const std::vector<float> a = logits(mx), b = logits(f32);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // A scale tensor of the wrong shape is a load error naming it.
  for (auto& t : as_mx)
    if (t.name == "language_model.model.layers.0.mlp.gate_proj.weight_scale_inv") {
      t.shape[1] -= 1;
      t.bytes.resize(size_t(t.shape[0] * t.shape[1]));
    }
  write_checkpoint_tensors(mx, as_mx, UINT64_MAX);
  try {
    Engine::load(mx, 1);
    FAIL() << "a bad scale shape loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate_proj.weight_scale_inv"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(root);
}

TEST(Mxfp8, QuantizerRoundsToTheNearestE4m3AndPicksTheSmallestFittingExponent) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes
    const float v = f8e4m3_to_f32(uint8_t(c));
    if (v == 0.0f) continue;           // +-0 both map to a zero
    EXPECT_EQ(f32_to_f8e4m3(v), uint8_t(c)) << c;  // every value is its own code
  }
  EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);  // saturates at 448
  EXPECT_EQ(f32_to_f8e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(1.0625f), 0x38);  // halfway between 1 (code 0x38, even) and 1.125: to even
  EXPECT_EQ(f32_to_f8e4m3(1.1875f), 0x3a);  // halfway between 1.125 (0x39, odd) and 1.25 (0x3a): to even
  std::vector<float> w(64, 0.0f);
  w[3] = 448.0f * 4;  // block 0's largest: exponent 2 (scale 4) keeps it at 448
  w[40] = 0.01f;      // block 1's largest
  std::vector<uint8_t> q(64), s(2);
  mxfp8_quantize_row(w.data(), 64, q.data(), s.data());
  EXPECT_EQ(s[0], 129);
  EXPECT_EQ(f8e4m3_to_f32(q[3]), 448.0f);
  EXPECT_LE(0.01 / std::ldexp(1.0, int(s[1]) - 127), 448.0);
  EXPECT_GT(0.01 / std::ldexp(1.0, int(s[1]) - 128), 448.0);  // one exponent less would saturate
}
