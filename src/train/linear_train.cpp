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

// out (cols, rows) = in (rows, cols)ᵀ
void transpose(const float* in, int64_t rows, int64_t cols, std::vector<float>& out) {
  out.resize(size_t(rows * cols));
  constexpr int64_t kTile = 32;  // tiles keep both sides in cache
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) out[size_t(c * rows + r)] = in[r * cols + c];
}

void add_into(const std::vector<float>& src, float* dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] += src[i];
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
  std::vector<float> a, b, product;
  if (dx != nullptr) {
    transpose(w, out, in, a);  // Wᵀ (in, out)
    if (accumulate_dx) {
      product.resize(size_t(rows * in));
      matmul(pool, dy, rows, dense_weight(DType::F32, a.data(), in, out), product.data());
      add_into(product, dx);
    } else {
      matmul(pool, dy, rows, dense_weight(DType::F32, a.data(), in, out), dx);
    }
  }
  if (dw != nullptr) {
    transpose(dy, rows, out, a);  // dyᵀ (out, rows)
    transpose(x, rows, in, b);    // xᵀ (in, rows)
    product.resize(size_t(out * in));
    matmul(pool, a.data(), out, dense_weight(DType::F32, b.data(), in, rows), product.data());
    add_into(product, dw);
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
