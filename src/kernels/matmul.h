#pragma once
// y[M, N] = x[M, K] · W[N, K]ᵀ with fp32 accumulation (W in its weight format, widened exactly).
// The kernel is looked up by (W's format, the active CPU path): the dense formats' tile kernels are
// built in; a weight format registers its kernels with register_matmul_kernel.
#include <cstdint>
#include <span>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "format/linear_weight.h"

namespace m3 {

// Plain reference: one dot product at a time, double accumulation. Tests only.
void matmul_ref(const float* x, int64_t M, const LinearWeight& w, float* y);

// Threaded over output columns (weight rows), with the kernels of cpu_active_path(). Every output
// is summed in one fixed order (kernels/matmul_tile.h), so a row's result does not depend on M, on
// the other rows, on the thread count or on blocking: results are bit-identical run to run.
void matmul(ThreadPool& pool, const float* x, int64_t M, const LinearWeight& w, float* y);

// Same, for a subset of rows of x: y[i] = x[rows[i]] · Wᵀ (MoE experts over the tokens routed to them).
void matmul_gather(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M, const LinearWeight& w,
                   float* y);

// One weight and its output, for matmul_many.
struct MatmulTarget {
  const LinearWeight* w;
  float* y;
};

// Several weights against the same rows of x (rows == nullptr: rows 0..M-1): each y as matmul /
// matmul_gather gives it, bit for bit. Weights of one built-in format and width (a layer's q, k
// and v; an expert's gate and up) share one packing of x and one pass of the pool over all their
// rows, where one call each packed x again and waited for the pool again.
void matmul_many(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M,
                 std::span<const MatmulTarget> targets);

// A format's matmul on one CPU path: y[i] = x[rows ? rows[i] : i] · Wᵀ for i < M. Every kernel
// must give a row's result independently of M, of the other rows and of the thread count (the
// exactness rules of docs/ARCHITECTURE.md), and match matmul_ref within fp32 rounding.
using MatmulKernel = void (*)(CpuPath path, ThreadPool& pool, const float* x, const int32_t* rows, int64_t M,
                              const LinearWeight& w, float* y);
// Throws m3::Error when (format, path) has a kernel already.
void register_matmul_kernel(const WeightFormat& format, CpuPath path, MatmulKernel kernel);
// The kernel of the best path at or below `path` registered for the format; nullptr when none.
MatmulKernel find_matmul_kernel(const WeightFormat& format, CpuPath path);

// Which kernels matmul uses here: "avx512", "avx2" or "generic" (M3_CPU can force one).
const char* matmul_kernel_name();
// How MXFP8's direct tiles widen E4M3 codes here: "f32" or "f16" (docs/FORMATS.md), or "tables"
// on the generic path.
const char* mxfp8_widening_name();


}  // namespace m3
