// The read-bandwidth loops behind every `m3 bench` bound: on every CPU path this machine runs, the
// one-stream and the four-stream sums read every float of the buffer once, whatever its length
// (tails of the streams and of the buffer), and the probe measures both patterns.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "base/cpu_features.h"
#include "base/machine_bounds.h"
#include "base/machine_bounds_impl.h"
#include "base/thread_pool.h"

namespace {

using m3::CpuPath;

TEST(MachineBounds, BothReadPatternsSumEveryFloatOnceOnEveryPath) {
  for (CpuPath path : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!m3::cpu_path_supported(path)) continue;
    const m3::BoundKernels& k = m3::bound_kernels_at(path);
    for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(1000), size_t(4 * 1024 + 17), size_t(100003)}) {
      // Small integers sum exactly in fp32 in any order: a float read twice or missed shows.
      std::vector<float> buf(n);
      double want = 0;
      for (size_t i = 0; i < n; ++i) want += (buf[i] = float(i % 7 + 1));
      EXPECT_EQ(double(k.sum_floats(buf.data(), n)), want) << k.name << " one stream, n = " << n;
      EXPECT_EQ(double(k.sum_float_streams(buf.data(), n)), want) << k.name << " four streams, n = " << n;
    }
  }
}

TEST(MachineBounds, TheProbeMeasuresBothPatterns) {
  m3::ThreadPool pool(2);
  m3::ReadBandwidthProbe probe(pool, size_t(16) << 20);
  const m3::ReadBandwidth r = probe.measure_each();
  EXPECT_GT(r.one_stream, 0.0);
  EXPECT_GT(r.streams, 0.0);
  EXPECT_GT(m3::measure_read_bandwidth(pool, size_t(16) << 20, 1), 0.0);
}

}  // namespace
