// The official MXFP8 layout (format/weight_format.h, docs/FORMATS.md) in checkpoints: one storing
// some linears as MXFP8 (F8_E4M3 weights with one UE8M0 exponent per 1x32 block in
// "<module>.weight_scale_inv") gives the same logits as one storing the dequantized values as F32,
// and the quantizer rounds as the format says. The format's dequantization and kernels are
// tested in mxfp8_format_test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "m3/error.h"
#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "fixtures/random_checkpoint.h"
#include "fixtures/random_mxfp8.h"
#include "format/linear_weight.h"
#include "format/mxfp8_quantize.h"
#include "format/weight_format.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "kernels/matmul_tile.h"
#include "runtime/engine.h"

using namespace m3;

namespace {

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

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
