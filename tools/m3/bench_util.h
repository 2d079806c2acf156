#pragma once
// Small helpers shared by the `m3 bench` subcommands.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "m3/bench_clock.h"

namespace m3::cli {

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double median = 0, mean = 0, stddev = 0;
};

// The mean, median and standard deviation of times in seconds.
inline Timing summarize_times(const std::vector<double>& t) {
  Timing r;
  std::vector<double> s = t;
  std::sort(s.begin(), s.end());
  r.median = s[s.size() / 2];
  for (double x : t) r.mean += x / double(t.size());
  for (double x : t) r.stddev += (x - r.mean) * (x - r.mean) / double(t.size());
  r.stddev = std::sqrt(r.stddev);
  return r;
}

// Times one run of fn in seconds (wall, or process CPU time / threads with a cpu clock).
inline double time_once(const std::function<void()>& fn, const BenchClock& clock = {}) {
  const double t0 = clock.now();
  fn();
  return clock.since(t0);
}

// Runs fn `reps` times (after `warmup` untimed runs) and summarises the times.
inline Timing time_runs(int reps, int warmup, const std::function<void()>& fn, const BenchClock& clock = {}) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(time_once(fn, clock));
  return summarize_times(t);
}

// Deterministic pseudo-random values in [-1, 1) for benchmark operands (a 64-bit LCG).
struct BenchLcg {
  uint64_t s;
  float next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return float(int32_t(s >> 32)) * (1.0f / 2147483648.0f);
  }
};

std::vector<long long> parse_int_list(const std::string& text, const std::string& what);

}  // namespace m3::cli
