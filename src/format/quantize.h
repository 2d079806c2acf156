#pragma once
// Writing weights in a quantized format (`m3 quantize`, test fixtures): one fp32 row of a linear
// weight to the format's main-tensor bytes and side-tensor bytes. The formats that can be
// written: the dense ones (bf16, f16, f32: round to nearest even), mxfp8 (mxfp8_quantize.h) and
// the affine ones (affine_quantize_row below).
#include <cstdint>

#include "format/weight_format.h"

namespace m3 {

// mlx's affine rounding for one row: per group, the bound of larger magnitude (min or max) is the
// bias, so it is represented exactly; the scale spans the group in 2^bits - 1 steps (negative when
// the bias is the max); both are stored as bf16 and each value rounds to the nearest step of the
// stored pair, clipped to [0, 2^bits - 1]. `words` gets cols * bits / 32 U32 (element 0 in the
// lowest bits), `scales` and `biases` cols / group bf16 each.
void affine_quantize_row(const float* w, int64_t cols, int bits, int group, uint32_t* words, uint16_t* scales,
                         uint16_t* biases);

// Whether quantize_row can write `format`.
bool can_quantize_to(const WeightFormat& format);

// One row of `cols` weights to `main` (format.row_bytes(cols) bytes) and each side tensor's row
// (side[i]: cols / block_cols * per_block elements of format.side[i].dtype).
void quantize_row(const WeightFormat& format, const float* w, int64_t cols, uint8_t* main, uint8_t* const* side);

}  // namespace m3
