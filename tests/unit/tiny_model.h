#pragma once
// A tiny random checkpoint (the `tiny` preset) written to a temporary folder and loaded, for unit
// tests that need a real model. The folder name carries the process id, because the release and
// the sanitizer builds may run the same test at the same time; it is removed afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "fixtures/random_checkpoint.h"
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

}  // namespace m3::test
