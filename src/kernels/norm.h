#pragma once
#include <cstdint>

namespace m3 {

// Gemma RMSNorm over each row of length n: out = x · (mean(x²) + eps)^(-1/2) · scale, where
// scale = 1 + w has been formed once at load time (spec §3.2). In place is allowed (out == x).
// rows (R, n), scale (n)
void gemma_rmsnorm(const float* x, const float* scale, int64_t rows, int64_t n, double eps, float* out);

}  // namespace m3
