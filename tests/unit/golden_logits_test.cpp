// Golden logits: the exact bits the engine computes for fixed seeded checkpoints, pinned as hashes
// so a refactor that claims "no numerical change" is checked bit for bit (one-shot, chunked and
// decode runs, continuous batching, the multimodal embedding path and the vision tower, with f32
// and bf16 caches, on 1 and 2 threads, which must agree).
//
// The bits depend on the CPU path (the AVX-512, AVX2 and plain kernels sum in other orders and use
// other exp approximations), so tests/unit/golden_logits.txt holds one set of hashes per path.
// ctest runs this binary once per path the machine has (M3_CPU=...); a path without goldens fails.
// After a change that is meant to move the bits, regenerate with
//   M3_GOLDEN_UPDATE=1 M3_CPU=<path> build/release/tests/golden_logits_test
// for every path, and say why in the commit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "fixtures/random_checkpoint.h"
#include "runtime/engine.h"
#include "runtime/prefill.h"
#include "vision/vision_tower.h"

namespace {

namespace fs = std::filesystem;

// FNV-1a 64 over raw bytes: any flipped bit of any value changes it.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
uint64_t hash_floats(const std::vector<float>& v, uint64_t h = 1469598103934665603ull) {
  return fnv1a(v.data(), v.size() * sizeof(float), h);
}
uint64_t hash_file(const std::string& path, uint64_t h = 1469598103934665603ull) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  EXPECT_FALSE(s.empty()) << path;
  return fnv1a(s.data(), s.size(), h);
}
std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string golden_path() { return std::string(M3_SOURCE_DIR) + "/tests/unit/golden_logits.txt"; }

// "path case hash" lines.
std::map<std::string, std::string> read_goldens() {
  std::map<std::string, std::string> g;
  std::ifstream f(golden_path());
  std::string path, name, h;
  while (f >> path >> name >> h) g[path + " " + name] = h;
  return g;
}

void write_goldens(const std::map<std::string, std::string>& g) {
  std::ofstream f(golden_path());
  for (const auto& [key, h] : g) f << key << " " << h << "\n";
}

// Every case computed on this run, by name.
struct Results {
  std::map<std::string, std::string> by_case;
  void put(const std::string& name, uint64_t h) {
    const std::string v = hex(h);
    auto [it, fresh] = by_case.emplace(name, v);
    // The same case on another thread count must give the same bits.
    if (!fresh) {
      EXPECT_EQ(it->second, v) << name << " differs between thread counts";
    }
  }
};

std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);  // the engine of mt19937_64 is fully specified by the standard
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

struct Checkpoint {
  std::string dir;
  Checkpoint(const std::string& preset, uint64_t seed, std::optional<int> block = {}, std::optional<int> topk = {},
             std::optional<int> layers = {}) {
    dir = testing::TempDir() + "/m3_golden_" + preset + "_" + std::to_string(getpid());
    fs::remove_all(dir);
    m3::RandomCheckpointOptions o;
    o.preset = preset;
    o.seed = seed;
    o.out_dir = dir;
    o.block_size = block;
    o.topk = topk;
    o.layers = layers;
    m3::make_random_checkpoint(o);
  }
  ~Checkpoint() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  uint64_t files_hash() const {
    uint64_t h = 1469598103934665603ull;
    for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"}) h = hash_file(dir + "/" + f, h);
    return h;
  }
};

// One-shot, chunked and decode runs of one prompt, and a continuous-batching step.
void text_cases(const std::string& tag, const std::string& dir, int threads, m3::DType cache_dtype, Results& out) {
  auto engine = m3::Engine::load(dir, threads);
  m3::TextModel& model = engine->model();
  m3::KvCacheShape shape = model.cache_shape();
  shape.dtype = cache_dtype;
  const std::string c = tag + "." + (cache_dtype == m3::DType::BF16 ? "bf16" : "f32");
  const int vocab = engine->tokenizer().vocab_size();
  const int B = shape.block_size;
  // Long enough that MSA selects (top-k x block < length) in every preset used here.
  const int64_t n = int64_t(B) * 9 + 7;
  const std::vector<int32_t> prompt = random_tokens(size_t(n), vocab, 17);

  std::vector<float> logits;
  {
    m3::KvCache cache(shape);
    model.forward(cache, prompt.data(), n, m3::LogitsFor::All, logits);
    out.put(c + ".oneshot", hash_floats(logits));
  }
  {
    m3::KvCache cache(shape);
    m3::prefill(model, cache, prompt.data(), n, B + 5, m3::LogitsFor::All, logits);
    out.put(c + ".chunked", hash_floats(logits));
  }
  {
    m3::KvCache cache(shape);
    const int64_t head = n - 12;
    m3::prefill(model, cache, prompt.data(), head, 64, m3::LogitsFor::None, logits);
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = head; i < n; ++i) {
      model.forward(cache, prompt.data() + i, 1, m3::LogitsFor::Last, logits);
      h = hash_floats(logits, h);
    }
    out.put(c + ".decode", h);
  }
  {
    // Three sequences with other histories, one of them fed as embeddings, in one pass.
    const std::vector<int64_t> history = {int64_t(B) * 7 + 3, 5, int64_t(B) * 10};
    const std::vector<int64_t> step = {1, int64_t(B) + 2, 3};
    std::vector<std::unique_ptr<m3::KvCache>> caches;
    std::vector<std::vector<int32_t>> next(3);
    std::vector<std::vector<float>> got(3);
    std::vector<float> scratch;
    for (size_t s = 0; s < 3; ++s) {
      caches.push_back(std::make_unique<m3::KvCache>(shape));
      const auto hist = random_tokens(size_t(history[s]), vocab, 100 + s);
      m3::prefill(model, *caches[s], hist.data(), history[s], 32, m3::LogitsFor::None, scratch);
      next[s] = random_tokens(size_t(step[s]), vocab, 200 + s);
    }
    std::vector<float> emb(size_t(step[2]) * size_t(model.config().hidden_size));
    model.embed(next[2].data(), step[2], emb.data());
    std::vector<m3::BatchInput> inputs;
    for (size_t s = 0; s < 3; ++s) {
      m3::BatchInput in;
      in.cache = caches[s].get();
      in.n = step[s];
      in.which = s == 1 ? m3::LogitsFor::All : m3::LogitsFor::Last;
      in.logits = &got[s];
      if (s == 2) in.embeddings = emb.data();
      else in.tokens = next[s].data();
      inputs.push_back(in);
    }
    model.forward_batch(inputs);
    uint64_t h = 1469598103934665603ull;
    for (const auto& g : got) h = hash_floats(g, h);
    out.put(c + ".batched", h);
  }
}

// The vision tower on synthetic pixels, and the text model over a prompt whose rows 3.. are the
// tower's output (the multimodal embedding path).
void vision_cases(const std::string& dir, int threads, Results& out) {
  auto engine = m3::Engine::load(dir, threads);
  m3::vision::VisionTower tower(engine->config(), engine->store(), engine->pool());
  const m3::vision::GridThw grid{2, 4, 6};  // 2 temporal groups of 4 x 6 patches
  const int64_t rows = grid.patches(), cols = 1176;
  std::vector<float> pixels(size_t(rows * cols));
  std::mt19937_64 rng(23);
  for (auto& p : pixels) p = float(int64_t(rng() % 4001) - 2000) / 1000.0f;  // exact values in [-2, 2]
  const std::vector<float> merged = tower.forward(pixels.data(), rows, cols, grid);
  out.put("tiny-vl.tower", hash_floats(merged));

  m3::TextModel& model = engine->model();
  const int64_t H = model.config().hidden_size, m = tower.merged_tokens(grid), n = m + 9;
  const auto ids = random_tokens(size_t(n), engine->tokenizer().vocab_size(), 31);
  std::vector<float> x(size_t(n * H));
  model.embed(ids.data(), n, x.data());
  std::copy(merged.begin(), merged.end(), x.begin() + 3 * H);
  m3::KvCache cache(model.cache_shape());
  std::vector<float> logits;
  model.forward_embeddings(cache, x.data(), n, m3::LogitsFor::All, logits);
  out.put("tiny-vl.embeddings", hash_floats(logits));
}

TEST(GoldenLogits, BitsMatchThePinnedHashes) {
  const std::string path = m3::cpu_path_name(m3::cpu_active_path());
  Results r;
  {
    Checkpoint tiny("tiny", 5);
    r.put("tiny.files", tiny.files_hash());
    for (int threads : {1, 2})
      for (m3::DType dt : {m3::DType::F32, m3::DType::BF16}) text_cases("tiny", tiny.dir, threads, dt, r);
  }
  {
    // M3's head_dim and index dim with a small block, so kernels of M3's shape select sparsely.
    Checkpoint small("small", 6, 16, 4, 2);
    r.put("small.files", small.files_hash());
    for (int threads : {1, 2})
      for (m3::DType dt : {m3::DType::F32, m3::DType::BF16}) text_cases("small", small.dir, threads, dt, r);
  }
  {
    Checkpoint vl("tiny-vl", 7);
    r.put("tiny-vl.files", vl.files_hash());
    for (int threads : {1, 2}) vision_cases(vl.dir, threads, r);
  }

  std::map<std::string, std::string> goldens = read_goldens();
  const char* update = std::getenv("M3_GOLDEN_UPDATE");
  if (update != nullptr && std::string(update) == "1") {
    for (const auto& [name, h] : r.by_case) goldens[path + " " + name] = h;
    write_goldens(goldens);
    GTEST_SKIP() << "wrote " << r.by_case.size() << " goldens for " << path << " to " << golden_path();
  }
  for (const auto& [name, h] : r.by_case) {
    const auto it = goldens.find(path + " " + name);
    ASSERT_NE(it, goldens.end()) << "no golden for " << path << " " << name << " in " << golden_path();
    EXPECT_EQ(h, it->second) << path << " " << name << ": the bits changed";
  }
}

}  // namespace
