#pragma once
// The two vector primitives the training ops' inner loops are made of (dot products and
// y += a·x over a head's dims), on the kernels' CPU paths: Highway tables for AVX2, AVX-512, NEON
// and SVE (vec_ops_simd.cpp), plain C++ for the generic path. A call costs one indirect jump,
// small next to a 64- or 128-long row.
#include <cstdint>

#include "base/cpu_features.h"

namespace m3 {

struct VecOps {
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float alpha, const float* x, float* y, int64_t n);  // y += alpha·x
};

const VecOps& vec_ops();                 // the active path's (M3_CPU applies)
const VecOps& vec_ops_at(CpuPath path);  // the best table at or below `path` (tests)

// Per target in vec_ops_simd.cpp; nullptr where the build has none.
const VecOps* simd_vec_ops(CpuPath path);

}  // namespace m3
