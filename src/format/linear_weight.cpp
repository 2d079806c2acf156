#include "format/linear_weight.h"

#include <vector>

#include "m3/error.h"

namespace m3 {

int64_t LinearWeight::side_row_bytes(int i) const {
  const SideTensorSpec& s = format->side[size_t(i)];
  return cols / format->block_cols * s.per_block * int64_t(dtype_size(s.dtype));
}

uint64_t LinearWeight::stored_bytes() const {
  uint64_t bytes = uint64_t(rows * row_bytes());
  for (const SideTensorSpec& s : format->side)
    bytes += uint64_t(rows * (cols / format->block_cols) * s.per_block) * dtype_size(s.dtype);
  return bytes;
}

float LinearWeight::at(int64_t r, int64_t c) const {
  if (format->dense()) {
    const uint8_t* p = row_ptr(r);
    switch (element()) {
      case DType::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[c]);
      case DType::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(p)[c]);
      default: return reinterpret_cast<const float*>(p)[c];
    }
  }
  std::vector<float> row(static_cast<size_t>(cols));
  row_to_f32(r, row.data());
  return row[size_t(c)];
}

LinearWeight dense_weight(DType dtype, const void* data, int64_t rows, int64_t cols) {
  const WeightFormat* f = dense_format(dtype);
  M3_CHECK(f != nullptr, "a dense weight is BF16, F16 or F32, not ", dtype_name(dtype));
  LinearWeight w;
  w.format = f;
  w.data = static_cast<const uint8_t*>(data);
  w.rows = rows;
  w.cols = cols;
  return w;
}

}  // namespace m3
