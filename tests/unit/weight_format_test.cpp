// The weight-format seam: a format registered from this file alone (no engine code knows it) is
// found by the loader from the tensors a checkpoint stores, and runs the model end to end.
//
// The format, "test_q8", is a simple blocked scheme: int8 values q [rows, cols] in "<m>.weight" (I8)
// and one fp32 scale per 32 columns in "<m>.weight_scale" [rows, cols / 32]: W = q · scale. Its
// kernel dequantizes the matrix and runs the f32 kernel, so a checkpoint storing W as F32 must give
// the same bits; the scales are powers of two, so q · scale is exact in fp32.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "m3/error.h"
#include "fixtures/random_checkpoint.h"
#include "format/linear_weight.h"
#include "format/weight_format.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "runtime/engine.h"

using namespace m3;

namespace {

constexpr int64_t kBlock = 32;

void test_q8_row(const LinearWeight& w, int64_t r, float* out) {
  const int8_t* q = reinterpret_cast<const int8_t*>(w.row_ptr(r));
  const float* scale = reinterpret_cast<const float*>(w.side_row(0, r));
  for (int64_t c = 0; c < w.cols; ++c) out[c] = float(q[c]) * scale[c / kBlock];
}

const WeightFormat& test_q8() {
  static const WeightFormat f{"test_q8", DType::I8, 1, kBlock, {{"weight_scale", DType::F32, 1}}, &test_q8_row};
  return f;
}

// Test-only: a full dequantized copy, then the f32 kernel of the same path (real formats dequantize
// in registers or cache-sized tiles).
void test_q8_matmul(CpuPath path, ThreadPool& pool, const float* x, const int32_t* rows, int64_t M,
                    const LinearWeight& w, float* y) {
  std::vector<float> dense(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) w.row_to_f32(r, dense.data() + r * w.cols);
  const LinearWeight f = dense_weight(DType::F32, dense.data(), w.rows, w.cols);
  find_matmul_kernel(f32_format(), path)(path, pool, x, rows, M, f, y);
}

void register_test_q8() {
  static const bool done = [] {
    register_weight_format(test_q8());
    register_matmul_kernel(test_q8(), CpuPath::Generic, &test_q8_matmul);
    return true;
  }();
  (void)done;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A tiny checkpoint, then two copies of it in which the weights of `quantized` are replaced by
// random int8 x power-of-two-scale values: one stores them as test_q8, one as F32 (the same values).
struct TwinCheckpoints {
  std::string base, q8, f32;
  const std::set<std::string> quantized = {
      "language_model.model.layers.0.mlp.gate_proj.weight",
      "language_model.model.layers.0.mlp.down_proj.weight",
      "language_model.model.layers.1.self_attn.q_proj.weight",
      "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight",
  };

  TwinCheckpoints() {
    const std::string root = testing::TempDir() + "/m3_weight_format_" + std::to_string(getpid());
    base = root + "/base", q8 = root + "/q8", f32 = root + "/f32";
    std::filesystem::remove_all(root);
    RandomCheckpointOptions o;
    o.preset = "tiny";
    o.seed = 21;
    o.out_dir = base;
    make_random_checkpoint(o);
    const TensorStore store = TensorStore::open_dir(base);
    std::vector<TensorData> as_q8, as_f32;
    std::mt19937_64 rng(5);
    for (const std::string& name : store.names()) {
      const TensorView& t = store.get(name);
      if (!quantized.count(name)) {
        TensorData d{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
        as_q8.push_back(d);
        as_f32.push_back(std::move(d));
        continue;
      }
      const int64_t rows = t.shape[0], cols = t.shape[1];
      std::vector<int8_t> q(size_t(rows * cols));
      std::vector<float> scale(size_t(rows * cols / kBlock)), w(q.size());
      for (auto& s : scale) s = std::ldexp(1.0f, -6 - int(rng() % 4));  // 2^-6 .. 2^-9
      for (size_t i = 0; i < q.size(); ++i) {
        q[i] = int8_t(int(rng() % 255) - 127);
        w[i] = float(q[i]) * scale[i / size_t(kBlock)];
      }
      as_q8.push_back({name, DType::I8, {rows, cols}, bytes_of(q)});
      const std::string module = name.substr(0, name.size() - std::string("weight").size());
      as_q8.push_back({module + "weight_scale", DType::F32, {rows, cols / kBlock}, bytes_of(scale)});
      as_f32.push_back({name, DType::F32, {rows, cols}, bytes_of(w)});
    }
    for (const auto& [dir, tensors] : {std::pair{q8, &as_q8}, std::pair{f32, &as_f32}}) {
      std::filesystem::create_directories(dir);
      for (const char* f : {"config.json", "tokenizer.json"}) std::filesystem::copy_file(base + "/" + f, dir + "/" + f);
      write_checkpoint_tensors(dir, *tensors, UINT64_MAX);
    }
  }
  ~TwinCheckpoints() {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(base).parent_path(), ec);
  }
};

std::vector<float> logits_of(const std::string& dir, int threads) {
  auto engine = Engine::load(dir, threads);
  std::vector<int32_t> ids(150);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % size_t(engine->tokenizer().vocab_size()));
  KvCache cache(engine->model().cache_shape());
  std::vector<float> logits;
  engine->model().forward(cache, ids.data(), int64_t(ids.size()), LogitsFor::All, logits);
  return logits;
}

}  // namespace

// ctest runs each test in a process of its own; run as one binary, this test comes first, so no
// registration precedes it either way.
TEST(WeightFormat, UnregisteredFormatIsAClearLoadError) {
  TwinCheckpoints twins;
  try {
    Engine::load(twins.q8, 1);
    FAIL() << "loaded a checkpoint in an unknown format";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layers.0.mlp.gate_proj.weight has dtype I8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bf16 (BF16)"), std::string::npos) << msg;
  }
}

TEST(WeightFormat, RegisteredFromATestRunsTheModelEndToEnd) {
  register_test_q8();
  ASSERT_EQ(find_weight_format("test_q8"), &test_q8());
  TwinCheckpoints twins;
  {
    auto engine = Engine::load(twins.q8, 1);
    EXPECT_EQ(engine->model().config().num_hidden_layers, 4);
  }
  for (int threads : {1, 2}) {
    const std::vector<float> a = logits_of(twins.q8, threads), b = logits_of(twins.f32, threads);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << threads << " threads";
  }
}

TEST(WeightFormat, KernelMatchesTheReferenceAndSideTensorsAreChecked) {
  register_test_q8();
  const int64_t N = 5, K = 96, M = 3;
  std::vector<int8_t> q(size_t(N * K));
  std::vector<float> scale(size_t(N * K / kBlock)), x(size_t(M * K));
  std::mt19937_64 rng(8);
  for (auto& v : q) v = int8_t(int(rng() % 255) - 127);
  for (auto& s : scale) s = 0.01f * float(1 + rng() % 7);
  for (auto& v : x) v = float(int(rng() % 200) - 100) / 50.0f;
  LinearWeight w;
  w.format = &test_q8();
  w.data = reinterpret_cast<const uint8_t*>(q.data());
  w.side[0] = reinterpret_cast<const uint8_t*>(scale.data());
  w.rows = N;
  w.cols = K;
  ThreadPool pool(2);
  std::vector<float> y(size_t(M * N)), ref(size_t(M * N));
  matmul(pool, x.data(), M, w, y.data());
  matmul_ref(x.data(), M, w, ref.data());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << i;
  EXPECT_THROW(register_weight_format(test_q8()), Error);  // the name is taken
  EXPECT_THROW(register_matmul_kernel(test_q8(), CpuPath::Generic, &test_q8_matmul), Error);
  EXPECT_EQ(find_matmul_kernel(test_q8(), CpuPath::Avx512), &test_q8_matmul);  // falls back to generic
}
