#pragma once
// A tiny random checkpoint (the `tiny` preset) written to a temporary folder and loaded, for unit
// tests that need a real model. The folder name carries the process id, because the release and
// the sanitizer builds may run the same test at the same time; it is removed afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fixtures/random_checkpoint.h"
#include "m3/media.h"
#include "runtime/engine.h"

namespace m3::test {

struct TinyModel {
  std::unique_ptr<Engine> engine;
  std::string dir;

  TinyModel(const std::string& name, uint64_t seed, int threads = 1) {
    dir = testing::TempDir() + "/m3_" + name + "_" + std::to_string(getpid()) + "_" + std::to_string(threads);
    std::filesystem::remove_all(dir);
    RandomCheckpointOptions o;
    o.preset = "tiny";
    o.seed = seed;
    o.out_dir = dir;
    make_random_checkpoint(o);
    engine = Engine::load(dir, threads);
  }
  ~TinyModel() {
    engine.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  TinyModel(const TinyModel&) = delete;
  TinyModel& operator=(const TinyModel&) = delete;
};

// An image or video item with seeded random features: `groups` prefixes of per_group rows each,
// width H (the text model's hidden size).
inline std::shared_ptr<const EncodedMedia> random_media(vision::MediaKind kind, int64_t per_group,
                                                        std::vector<std::string> groups, int64_t H, uint32_t seed) {
  auto e = std::make_shared<EncodedMedia>();
  e->layout.kind = kind;
  e->layout.tokens_per_group = per_group;
  e->layout.group_prefix = std::move(groups);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  e->features.resize(size_t(per_group * int64_t(e->layout.group_prefix.size()) * H));
  for (float& v : e->features) v = d(rng);
  return e;
}

// A test suite whose tests share one tiny model, made before its first test and removed after its
// last: `class FooTest : public TinyModelSuite<FooTest> { static constexpr const char* kName = "foo";
// static constexpr uint64_t kSeed = 3; ... };` then engine() in the tests.
template <class Suite>
class TinyModelSuite : public testing::Test {
 protected:
  static void SetUpTestSuite() { tiny_ = std::make_unique<TinyModel>(Suite::kName, Suite::kSeed); }
  static void TearDownTestSuite() { tiny_.reset(); }
  static Engine& engine() { return *tiny_->engine; }

 private:
  static inline std::unique_ptr<TinyModel> tiny_;
};

}  // namespace m3::test
