#pragma once
// y[M, N] = x[M, K] · W[N, K]ᵀ with fp32 accumulation (W in its stored dtype).
#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace m3 {

// Plain reference: one dot product at a time, double accumulation. Tests only.
void matmul_ref(const float* x, int64_t M, const WeightMatrix& w, float* y);

// Threaded over output columns; each weight row is widened to fp32 once and used for all M rows.
void matmul(ThreadPool& pool, const float* x, int64_t M, const WeightMatrix& w, float* y);

// Same, for a subset of rows of x: y[i] = x[rows[i]] · Wᵀ (MoE experts over the tokens routed to them).
void matmul_gather(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M, const WeightMatrix& w,
                   float* y);

float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace m3
