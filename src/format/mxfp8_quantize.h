#pragma once
// Writing the MXFP8 layout (format/weight_format.h, mxfp8_format): fp32 weights to E4M3 bytes with
// one UE8M0 exponent per 1x32 block. For checkpoints the engine writes itself (test fixtures,
// `m3 make-checkpoint --weights mxfp8`; later `m3 quantize`).
#include <cstdint>

namespace m3 {

// The E4M3 byte nearest to v (ties to the even code), saturating to +-448; NaN gives 0x7f.
uint8_t f32_to_f8e4m3(float v);

// One row of `cols` weights (a multiple of 32) to `cols` E4M3 bytes and cols/32 scale bytes. Each
// block's exponent is the smallest that keeps its largest magnitude within 448, so no value of the
// block saturates: s = 127 + ceil(log2(amax / 448)) (127 for an all-zero block).
void mxfp8_quantize_row(const float* w, int64_t cols, uint8_t* q, uint8_t* scales);

}  // namespace m3
