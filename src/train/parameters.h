#pragma once
// The trainable parameters of the text tower in one flat array, one slice per checkpoint tensor
// (llm.c's "one allocation"), laid out in the tensor schema's order. Gradients and optimizer
// moments use the same table, so a tensor's gradient is the same slice of the gradient array.
#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/tensor_schema.h"

namespace m3::train {

class ParameterTable {
 public:
  explicit ParameterTable(const TextConfig& cfg);

  const std::vector<TensorSpec>& specs() const { return specs_; }
  int64_t offset(size_t spec) const { return offset_[spec]; }
  int64_t total() const { return total_; }
  // Offset of the tensor with this role (and layer, expert); throws when the model has none.
  int64_t at(TensorRole role, int layer = -1, int expert = -1) const;
  bool has(TensorRole role, int layer = -1, int expert = -1) const;

 private:
  std::vector<TensorSpec> specs_;
  std::vector<int64_t> offset_;
  int64_t total_ = 0;
};

// Every tensor of the table read from `store` (any stored format, dequantized exactly) as T.
template <typename T>
std::vector<T> load_parameters(const TensorStore& store, const ModelConfig& cfg, const ParameterTable& table);

// The tensors as F32 safetensors entries named as the checkpoint's (the gradient file of `m3 grad`,
// and training checkpoints). skip_routing_bias leaves out e_score_correction_bias.
template <typename T>
std::vector<TensorData> parameter_tensors(const ParameterTable& table, const T* values, bool skip_routing_bias);

}  // namespace m3::train
