#include "kernels/vec_ops.h"

#include "base/cpu_dispatch.h"

namespace m3 {

namespace {

float dot_generic(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_generic(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

constexpr VecOps kGeneric{dot_generic, axpy_generic};

const PathTables<VecOps>& tables() {
  static const PathTables<VecOps> t{&kGeneric, simd_vec_ops(CpuPath::Avx2), simd_vec_ops(CpuPath::Avx512),
                                    simd_vec_ops(CpuPath::Neon), simd_vec_ops(CpuPath::Sve)};
  return t;
}

}  // namespace

const VecOps& vec_ops() { return tables().active(); }
const VecOps& vec_ops_at(CpuPath path) { return tables().at(path); }

}  // namespace m3
