#pragma once
// The loops behind machine_bounds.cpp as a table per CPU path (base/cpu_dispatch.h); the AVX-512
// table comes from machine_bounds_avx512.cpp (nullptr when the build has no x86 code).
#include <cstddef>
#include <cstdint>

namespace m3 {

struct BoundKernels {
  const char* name;
  // A register-only loop of independent FMA chains; flops_per_iter fp32 flops per iteration.
  float (*fma_loop)(int64_t iters);
  double flops_per_iter;
  // A streaming sum of n floats (memory read bandwidth).
  float (*sum_floats)(const float* p, size_t n);
};

const BoundKernels* avx512_bound_kernels();

}  // namespace m3
