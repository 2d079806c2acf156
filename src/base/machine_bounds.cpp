#include "base/machine_bounds.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <time.h>

#include "base/cpu_dispatch.h"
#include "base/machine_bounds_impl.h"

namespace m3 {

namespace {

// Sixteen partial sums: the compiler vectorises the inner loop (SSE for the generic path, AVX2 for
// the copy compiled with the AVX2 target).
inline float sum_floats_plain(const float* p, size_t n) {
  float s[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) s[j] += p[i + j];
  float r = 0;
  for (; i < n; ++i) r += p[i];
  for (float x : s) r += x;
  return r;
}
float sum_floats_generic(const float* p, size_t n) { return sum_floats_plain(p, n); }
float sum_float_streams_generic(const float* p, size_t n) { return sum_float_streams_plain(p, n); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) float sum_floats_avx2(const float* p, size_t n) { return sum_floats_plain(p, n); }
__attribute__((target("avx2"))) float sum_float_streams_avx2(const float* p, size_t n) {
  return sum_float_streams_plain(p, n);
}

// The AVX2 machine has FMA: use it (plain C++ builds with -ffp-contract=off never fuse a*b+c).
__attribute__((target("avx2,fma")))
float fma_loop_avx2(int64_t iters) {
  float a[96];
  for (int i = 0; i < 96; ++i) a[i] = 1.0f + 1e-7f * i;
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 96; ++i) a[i] = __builtin_fmaf(a[i], 0.999999f, 1e-7f);
  float s = 0;
  for (float x : a) s += x;
  return s;
}

constexpr BoundKernels kAvx2{"avx2", &fma_loop_avx2, 96.0 * 2, &sum_floats_avx2, &sum_float_streams_avx2};
constexpr const BoundKernels* kAvx2Table = &kAvx2;
#else
constexpr const BoundKernels* kAvx2Table = nullptr;
#endif

float fma_loop_generic(int64_t iters) {
  float a[96];
  for (int i = 0; i < 96; ++i) a[i] = 1.0f + 1e-7f * i;
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 96; ++i) a[i] = a[i] * 0.999999f + 1e-7f;
  float s = 0;
  for (float x : a) s += x;
  return s;
}

constexpr BoundKernels kGeneric{"generic", &fma_loop_generic, 96.0 * 2, &sum_floats_generic,
                                 &sum_float_streams_generic};

const PathTables<BoundKernels>& bound_tables() {
  static const PathTables<BoundKernels> tables{&kGeneric, kAvx2Table, avx512_bound_kernels()};
  return tables;
}

const BoundKernels& active() { return bound_tables().active(); }

}  // namespace

const BoundKernels& bound_kernels_at(CpuPath path) { return bound_tables().at(path); }

double BenchClock::now() const {
  if (!cpu) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)) / threads;
}

ReadBandwidthProbe::ReadBandwidthProbe(ThreadPool& pool, size_t bytes)
    : pool_(pool), n_(bytes / sizeof(float)), buf_(n_ * sizeof(float)) {
  const size_t threads = size_t(pool_.size());
  // First touch from the thread that reads each share, so pages are placed the way they are read.
  pool_.on_each_thread([&](int t) {
    std::fill(floats() + n_ * size_t(t) / threads, floats() + n_ * size_t(t + 1) / threads, 1.0f);
  });
}

ReadBandwidth ReadBandwidthProbe::measure_each(const BenchClock& clock) {
  const size_t threads = size_t(pool_.size());
  auto lo = [&](int t) { return n_ * size_t(t) / threads; };
  auto pass = [&](float (*sum)(const float*, size_t)) {
    std::vector<float> part(threads, 0.0f);
    const double t0 = clock.now();
    pool_.on_each_thread([&](int t) { part[size_t(t)] = sum(floats() + lo(t), lo(t + 1) - lo(t)); });
    const double dt = clock.since(t0);
    volatile float sink = 0.0f;
    for (float x : part) sink = sink + x;
    return double(n_ * sizeof(float)) / dt / 1e9;
  };
  ReadBandwidth r;
  r.one_stream = pass(active().sum_floats);
  r.streams = pass(active().sum_float_streams);
  return r;
}

double ReadBandwidthProbe::measure(const BenchClock& clock) { return measure_each(clock).best(); }

ReadBandwidth measure_read_patterns(ThreadPool& pool, size_t bytes, int reps, const BenchClock& clock) {
  ReadBandwidthProbe probe(pool, bytes);
  ReadBandwidth best;
  for (int r = 0; r < reps; ++r) {
    const ReadBandwidth each = probe.measure_each(clock);
    best.one_stream = std::max(best.one_stream, each.one_stream);
    best.streams = std::max(best.streams, each.streams);
  }
  return best;
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps, const BenchClock& clock) {
  return measure_read_patterns(pool, bytes, reps, clock).best();
}

double measure_fma_peak(ThreadPool& pool, int reps, const BenchClock& clock) {
  const int64_t iters = 20'000'000;
  const double flops_per_iter = active().flops_per_iter;
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < reps; ++r) {
    std::vector<float> part(size_t(pool.size()), 0.0f);
    const double t0 = clock.now();
    pool.on_each_thread([&](int t) { part[size_t(t)] = active().fma_loop(iters); });
    const double dt = clock.since(t0);
    for (float x : part) sink = sink + x;
    best = std::max(best, flops_per_iter * double(iters) * pool.size() / dt / 1e9);
  }
  return best;
}

}  // namespace m3
