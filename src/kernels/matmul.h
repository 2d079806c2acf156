#pragma once
// y[M, N] = x[M, K] · W[N, K]ᵀ with fp32 accumulation (W in its stored dtype).
#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace m3 {

// Plain reference: one dot product at a time, double accumulation. Tests only.
void matmul_ref(const float* x, int64_t M, const WeightMatrix& w, float* y);

// Threaded over output columns (weight rows), with the kernels of cpu_active_path(). Every output
// is summed in one fixed order (kernels/matmul_tile.h), so a row's result does not depend on M, on
// the other rows, on the thread count or on blocking: results are bit-identical run to run.
void matmul(ThreadPool& pool, const float* x, int64_t M, const WeightMatrix& w, float* y);

// Same, for a subset of rows of x: y[i] = x[rows[i]] · Wᵀ (MoE experts over the tokens routed to them).
void matmul_gather(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M, const WeightMatrix& w,
                   float* y);

// Which kernels matmul uses here: "avx512", "avx2" or "generic" (M3_CPU can force one).
const char* matmul_kernel_name();

float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace m3
