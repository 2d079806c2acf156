#pragma once
// A [rows, cols] weight matrix as stored in the checkpoint (PyTorch [out, in] layout), read in
// place from the memory map. Element type is BF16, F16 or F32; math is always fp32.
#include <cstdint>

#include "base/dtype.h"

namespace m3 {

struct WeightMatrix {
  DType dtype = DType::BF16;
  const uint8_t* data = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features

  const uint8_t* row_ptr(int64_t r) const { return data + size_t(r) * size_t(cols) * dtype_size(dtype); }
  // Converts row r to fp32 (exactly: every supported type widens losslessly).
  void row_to_f32(int64_t r, float* out) const;
  float at(int64_t r, int64_t c) const;
};

}  // namespace m3
