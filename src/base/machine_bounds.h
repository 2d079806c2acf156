#pragma once
// The two limits every benchmark is reported against, measured in the same run as the benchmark:
// memory read bandwidth (streaming sums over a buffer far larger than the caches) and the fp32 FMA
// peak (a register-only FMA loop). Both use every thread of the pool. The one implementation behind
// every `m3 bench` subcommand.
#include <cstddef>
#include <memory>

#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "m3/bench_clock.h"

namespace m3 {

// GB/s (1e9 bytes/s) of a pass over a buffer on every thread of the pool, read two ways: each
// thread's share front to back (one stream), and cut into 4 streams read a line of each in turn,
// with software prefetches, as the decode tiles read weight rows. Which is faster depends on the
// machine (docs/BENCHMARKS.md §0ze: on a Zen 4 guest one stream, on a Zen 5 guest four streams by
// a third), so the bound is the faster one.
struct ReadBandwidth {
  double one_stream = 0, streams = 0;
  double best() const { return one_stream > streams ? one_stream : streams; }
};

// A buffer far larger than the caches, kept for repeated measurements of the read bandwidth: a
// benchmark that runs for minutes on a machine whose bandwidth drifts (other tenants) measures it
// beside each run it compares with it, not once at the start.
class ReadBandwidthProbe {
 public:
  // `bytes` of floats, first touched by the thread of the pool that reads each share, on huge pages
  // as the weights are (base/mapped_file.h), so that a decode's reads and this bound see the same TLB.
  ReadBandwidthProbe(ThreadPool& pool, size_t bytes = size_t(1) << 30);
  // One pass of each read pattern.
  ReadBandwidth measure_each(const BenchClock& clock = {});
  // The faster of the two patterns of one measure_each().
  double measure(const BenchClock& clock = {});

 private:
  ThreadPool& pool_;
  size_t n_;  // floats
  HugePageBuffer buf_;
  float* floats() const { return reinterpret_cast<float*>(buf_.data()); }
};

// GB/s (1e9 bytes/s) reading `bytes` (default 1 GiB) in each pattern, best of `reps` each.
ReadBandwidth measure_read_patterns(ThreadPool& pool, size_t bytes = size_t(1) << 30, int reps = 3, const BenchClock& clock = {});
// The faster pattern of measure_read_patterns.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t(1) << 30, int reps = 3, const BenchClock& clock = {});
// GFLOP/s of fp32 FMA (2 flops each) on the kernels' vector path (M3_CPU applies), best of `reps`.
double measure_fma_peak(ThreadPool& pool, int reps = 3, const BenchClock& clock = {});

}  // namespace m3
