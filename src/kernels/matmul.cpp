#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

namespace m3 {

void WeightMatrix::row_to_f32(int64_t r, float* out) const {
  const uint8_t* p = row_ptr(r);
  switch (dtype) {
    case DType::BF16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(h[c]);
      break;
    }
    case DType::F16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
      for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(h[c]);
      break;
    }
    case DType::F32: std::copy_n(reinterpret_cast<const float*>(p), cols, out); break;
    default: break;  // the loader only builds WeightMatrix for the three types above
  }
}

float WeightMatrix::at(int64_t r, int64_t c) const {
  const uint8_t* p = row_ptr(r);
  switch (dtype) {
    case DType::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[c]);
    case DType::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(p)[c]);
    case DType::F32: return reinterpret_cast<const float*>(p)[c];
    default: return 0.0f;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
float dot_f32(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums let the compiler vectorise without -ffast-math.
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

void matmul_ref(const float* x, int64_t M, const WeightMatrix& w, float* y) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < w.rows; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) s += double(x[m * w.cols + k]) * double(w.at(n, k));
      y[m * w.rows + n] = float(s);
    }
}

namespace {

void matmul_rows(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M, const WeightMatrix& w,
                 float* y) {
  const int64_t K = w.cols, N = w.rows;
  // Grain: enough output columns per task that widening a row is amortised over M dot products.
  pool.parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> wrow(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      w.row_to_f32(n, wrow.data());
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = x + (rows ? int64_t(rows[m]) : m) * K;
        y[m * N + n] = dot_f32(xr, wrow.data(), K);
      }
    }
  }, 16);
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int64_t M, const WeightMatrix& w, float* y) {
  matmul_rows(pool, x, nullptr, M, w, y);
}

void matmul_gather(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M, const WeightMatrix& w,
                   float* y) {
  matmul_rows(pool, x, rows, M, w, y);
}

}  // namespace m3
