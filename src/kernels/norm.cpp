#include "kernels/norm.h"

#include "kernels/elementwise.h"

namespace m3 {

void gemma_rmsnorm(const float* x, const float* scale, int64_t rows, int64_t n, double eps, float* out) {
  elementwise_kernels().rmsnorm(x, scale, rows, n, eps, out);
}

}  // namespace m3
