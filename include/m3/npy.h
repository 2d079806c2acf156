#pragma once
// NumPy .npy (format 1.0) writer and reader for float32 arrays: `m3 logits` output, test data.
#include <cstdint>
#include <string>
#include <vector>

namespace m3 {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
// Reads a little-endian float32, C-order .npy; throws m3::Error naming the file otherwise.
std::vector<float> read_npy_f32(const std::string& path, std::vector<int64_t>& shape);

}  // namespace m3
