// Linear forward and backward. float runs on the inference matmul kernels (kernels/matmul.h), which
// compute y = x · Wᵀ for a W stored (out, in): the two backward products are that same product of
// transposed operands,
//   dx (rows, in)  = dy · W    = dy  · (Wᵀ)ᵀ       -> matmul(dy, weight = Wᵀ as (in, out))
//   dw (out, in)   = dyᵀ · x   = dyᵀ · (xᵀ)ᵀ       -> matmul(dyᵀ, weight = xᵀ as (in, rows))
// so training gets the kernels' speed and their fixed summation order (deterministic for any
// thread count). The transposes cost O(size of the operands), against O(rows·in·out) for the product.
// double (the gradient checks) uses plain loops with one fixed order.
#include <algorithm>
#include <vector>

#include "kernels/matmul.h"
#include "train/train_ops.h"

namespace m3::train {

namespace {

// Scratch that lives as long as the thread: the backward runs several transposes per linear per
// step, and fresh buffers would be zeroed and page-faulted in every time.
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// out (cols, rows) = in (rows, cols)ᵀ, in 8 x 8 tiles: each tile's reads and writes stay in one
// cache line per row.
float* transpose(int slot, const float* in, int64_t rows, int64_t cols) {
  float* out = scratch(slot, size_t(rows * cols));
  constexpr int64_t kTile = 8;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
    }
  }
  return out;
}

void add_into(const float* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

template <>
void linear_forward<float>(ThreadPool& pool, const float* x, const float* w, int64_t rows, int64_t in, int64_t out,
                           float* y) {
  matmul(pool, x, rows, dense_weight(DType::F32, w, out, in), y);
}

template <>
void linear_backward<float>(ThreadPool& pool, const float* x, const float* w, const float* dy, int64_t rows, int64_t in,
                            int64_t out, float* dx, float* dw, bool accumulate_dx) {
  if (dx != nullptr) {
    const float* wt = transpose(0, w, out, in);  // Wᵀ (in, out)
    if (accumulate_dx) {
      float* product = scratch(2, size_t(rows * in));
      matmul(pool, dy, rows, dense_weight(DType::F32, wt, in, out), product);
      add_into(product, size_t(rows * in), dx);
    } else {
      matmul(pool, dy, rows, dense_weight(DType::F32, wt, in, out), dx);
    }
  }
  if (dw != nullptr) {
    const float* dyt = transpose(0, dy, rows, out);  // dyᵀ (out, rows)
    const float* xt = transpose(1, x, rows, in);     // xᵀ (in, rows)
    float* product = scratch(2, size_t(out * in));
    matmul(pool, dyt, out, dense_weight(DType::F32, xt, in, rows), product);
    add_into(product, size_t(out * in), dw);
  }
}

template <>
void linear_forward<double>(ThreadPool& pool, const double* x, const double* w, int64_t rows, int64_t in, int64_t out,
                            double* y) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0.0;
        for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
        y[r * out + o] = s;
      }
  });
}

template <>
void linear_backward<double>(ThreadPool& pool, const double* x, const double* w, const double* dy, int64_t rows,
                             int64_t in, int64_t out, double* dx, double* dw, bool accumulate_dx) {
  if (dx != nullptr)
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t i = 0; i < in; ++i) {
          double s = 0.0;
          for (int64_t o = 0; o < out; ++o) s += dy[r * out + o] * w[o * in + i];
          dx[r * in + i] = accumulate_dx ? dx[r * in + i] + s : s;
        }
    });
  if (dw != nullptr)
    pool.parallel_for(out, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        for (int64_t i = 0; i < in; ++i) {
          double s = 0.0;
          for (int64_t r = 0; r < rows; ++r) s += dy[r * out + o] * x[r * in + i];
          dw[o * in + i] += s;
        }
    });
}

}  // namespace m3::train
