#pragma once
// Weight formats: how a linear weight [rows, cols] (PyTorch [out, in]) is laid out in a checkpoint.
// A format names the element type of its main tensor, how many weights one element packs, the
// block of columns that shares side-tensor values (scales, zero points), the side tensors, and an
// exact reference dequantization. The matmul kernels for a format are looked up per CPU path in
// kernels/matmul.h; the model code never sees a format, only LinearWeight.
//
// Formats live in a registry: bf16, f16 and f32 (dense, the release's dtypes) are built in; more
// are registered once at start-up (register_weight_format). Registration is the one piece of
// global mutable state besides the thread pool: append-only, under a lock, and a registered format
// lives for the whole process.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "m3/dtype.h"

namespace m3 {

struct LinearWeight;

// A side tensor of a quantized weight, named "<module>.<suffix>" next to "<module>.weight" (the
// MXFP8 release: "q_proj.weight_scale_inv"; MLX: "q_proj.scales", "q_proj.biases").
struct SideTensorSpec {
  std::string suffix;
  DType dtype;
  // Shape [rows, cols / block_cols * per_block].
  int64_t per_block = 1;
};

struct WeightFormat {
  std::string name;     // "bf16", "mxfp8", ...: what `m3 inspect` and errors print
  DType element;        // dtype of the main tensor "<module>.weight"
  int weights_per_element = 1;  // e.g. 8 for 4-bit values packed in U32
  int64_t block_cols = 1;       // columns that share one set of side values; cols must be a multiple
  std::vector<SideTensorSpec> side;
  // Row r of w to fp32, exactly as the format defines the weight (the reference every kernel of the
  // format is tested against).
  void (*dequantize_row)(const LinearWeight& w, int64_t r, float* out) = nullptr;
  // Columns [c0, c1) of row r to fp32, the same values (c0, c1 multiples of block_cols, or c1 =
  // cols): what the matmul's panel tiles widen a chunk of a blocked format with. nullptr for the
  // dense formats, whose kernels widen them in registers.
  void (*dequantize_cols)(const LinearWeight& w, int64_t r, int64_t c0, int64_t c1, float* out) = nullptr;

  // The stored main tensor of a [rows, cols] weight is [rows, stored_cols(cols)].
  int64_t stored_cols(int64_t cols) const { return cols / weights_per_element; }
  int64_t row_bytes(int64_t cols) const { return stored_cols(cols) * int64_t(dtype_size(element)); }
  bool dense() const { return side.empty() && weights_per_element == 1 && block_cols == 1; }
};

// The dense formats: the main tensor in BF16, F16 or F32, nothing else.
const WeightFormat& bf16_format();
const WeightFormat& f16_format();
const WeightFormat& f32_format();
// The dense format of a dtype; nullptr for other dtypes.
const WeightFormat* dense_format(DType dtype);
// The official MiniMax-M3-MXFP8 release's layout (OCP Microscaling MXFP8): "<module>.weight"
// F8_E4M3 [rows, cols] and "<module>.weight_scale_inv" U8 [rows, cols / 32], one UE8M0 exponent
// per 1x32 block along the row: W = e4m3 x 2^(s - 127) (s = 255: NaN). docs/FORMATS.md.
const WeightFormat& mxfp8_format();

// The affine layout mlx-lm writes (its "affine" quantization mode): "<module>.weight" U32
// [rows, cols * bits / 32] packing 32 / bits unsigned values per word, element 0 in the lowest
// bits; "<module>.scales" and "<module>.biases" BF16 [rows, cols / group], W = scale x q + bias.
// bits 4 or 8, group 32, 64 or 128; nullptr for other values. Named "affine<bits>-g<group>".
const WeightFormat* affine_format(int bits, int group);
// A format's affine parameters; nullopt for the other formats.
struct AffineParams {
  int bits, group;
};
std::optional<AffineParams> affine_params(const WeightFormat& format);

// Adds a format (which must outlive the process, e.g. a static). Throws m3::Error when its name is
// taken or it lacks a dequantize_row.
void register_weight_format(const WeightFormat& format);
// Every format, built-in first, then in registration order.
std::vector<const WeightFormat*> weight_formats();
const WeightFormat* find_weight_format(std::string_view name);

// The format a stored weight is in: the one whose main dtype is `element` and for which `fits`
// holds (its side tensors exist, the shapes match), preferring the one with the most side
// tensors; nullptr when none fits.
const WeightFormat* match_weight_format(DType element, const std::function<bool(const WeightFormat&)>& fits);

}  // namespace m3
