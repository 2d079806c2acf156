#pragma once
// The loops behind machine_bounds.cpp as a table per CPU path (base/cpu_dispatch.h); the AVX-512
// table comes from machine_bounds_avx512.cpp (nullptr when the build has no x86 code).
#include <cstddef>
#include <cstdint>

#include "base/cpu_features.h"

namespace m3 {

struct BoundKernels {
  const char* name;
  // A register-only loop of independent FMA chains; flops_per_iter fp32 flops per iteration.
  float (*fma_loop)(int64_t iters);
  double flops_per_iter;
  // A streaming sum of n floats (memory read bandwidth): front to back, one stream.
  float (*sum_floats)(const float* p, size_t n);
  // The same sum read as kReadStreams streams: the n floats cut into that many contiguous parts,
  // read a 64-byte line of each in turn, each asked for kStreamPrefetchBytes ahead (as the decode
  // tiles read their rows).
  float (*sum_float_streams)(const float* p, size_t n);
};

constexpr int kReadStreams = 4;
constexpr int kStreamPrefetchBytes = 1024;

// The plain loop of sum_float_streams, for the paths without intrinsics of their own (compiled
// into each path's copy with that path's target).
inline float sum_float_streams_plain(const float* p, size_t n) {
  const size_t each = n / kReadStreams / 16 * 16;  // whole lines per stream; the tail at the end
  float s[kReadStreams][16] = {};
  for (size_t i = 0; i < each; i += 16)
    for (int k = 0; k < kReadStreams; ++k) {
      const float* q = p + size_t(k) * each + i;
      __builtin_prefetch(reinterpret_cast<const char*>(q) + kStreamPrefetchBytes);
      for (int j = 0; j < 16; ++j) s[k][j] += q[j];
    }
  float r = 0;
  for (size_t i = each * kReadStreams; i < n; ++i) r += p[i];
  for (const auto& row : s)
    for (float x : row) r += x;
  return r;
}

const BoundKernels* avx512_bound_kernels();
// The loops `path` runs (the best table at or below it), for the tests.
const BoundKernels& bound_kernels_at(CpuPath path);

}  // namespace m3
