#pragma once
// A linear weight [rows, cols] (PyTorch [out, in]: rows = output features) in some weight format,
// read in place from the memory map: the main tensor plus the format's side tensors. Math on it is
// always fp32 (kernels/matmul.h); row_to_f32 is the format's exact dequantization.
#include <cstdint>

#include "m3/dtype.h"
#include "format/weight_format.h"

namespace m3 {

struct LinearWeight {
  static constexpr int kMaxSide = 2;

  const WeightFormat* format = nullptr;
  const uint8_t* data = nullptr;            // main tensor, rows x format->row_bytes(cols)
  const uint8_t* side[kMaxSide] = {};       // side tensors, in the order of format->side
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features

  DType element() const { return format->element; }
  int64_t row_bytes() const { return format->row_bytes(cols); }
  const uint8_t* row_ptr(int64_t r) const { return data + r * row_bytes(); }
  // Bytes stored for the weight: the main tensor and its side tensors (block scales, biases).
  uint64_t stored_bytes() const;
  // Row r of side tensor i (format->side[i]), and the bytes from one of its rows to the next.
  const uint8_t* side_row(int i, int64_t r) const { return side[i] + r * side_row_bytes(i); }
  int64_t side_row_bytes(int i) const;
  void row_to_f32(int64_t r, float* out) const { format->dequantize_row(*this, r, out); }
  float at(int64_t r, int64_t c) const;  // one element (blocked formats dequantize its row: tests only)
};

// A weight in the dense format of `dtype` (BF16, F16 or F32); throws m3::Error for other dtypes.
LinearWeight dense_weight(DType dtype, const void* data, int64_t rows, int64_t cols);

}  // namespace m3
