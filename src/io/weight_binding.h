#pragma once
// Checkpoint tensors -> the views the model computes with, for any tensor of the schema: a linear
// weight in whatever registered weight format the file stores it (the main tensor's dtype and the
// side tensors beside it decide), or a small vector widened to fp32. Errors name the file, the
// tensor and what was expected.
#include <vector>

#include "format/linear_weight.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/tensor_schema.h"

namespace m3 {

// spec.storage must be Linear or RowTable. The main tensor must have spec's shape in its format's
// packing ([rows, cols / weights_per_element]), each side tensor [rows, cols / block_cols * per_block].
// With `quantization` (mlx-lm's config block), an affine weight must have the bits and group the
// config names for its module.
LinearWeight bind_linear(const TensorStore& store, const TensorSpec& spec,
                         const QuantizationConfig* quantization = nullptr);

// A Vector tensor (norm weights, biases) in BF16, F16 or F32, widened exactly to fp32.
std::vector<float> read_f32_vector(const TensorStore& store, const TensorSpec& spec);

}  // namespace m3
