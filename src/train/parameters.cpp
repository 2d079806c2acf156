#include "train/parameters.h"

#include <cstring>

#include "m3/error.h"
#include "io/weight_binding.h"

namespace m3::train {

ParameterTable::ParameterTable(const TextConfig& cfg) : specs_(text_tensor_schema(cfg)) {
  for (const TensorSpec& s : specs_) {
    offset_.push_back(total_);
    total_ += s.numel();
  }
}

bool ParameterTable::has(TensorRole role, int layer, int expert) const {
  for (const TensorSpec& s : specs_)
    if (s.role == role && s.layer == layer && s.expert == expert) return true;
  return false;
}

int64_t ParameterTable::at(TensorRole role, int layer, int expert) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    const TensorSpec& s = specs_[i];
    if (s.role == role && s.layer == layer && s.expert == expert) return offset_[i];
  }
  fail("parameter table: no ", tensor_role_name(role), " tensor for layer ", layer, ", expert ", expert);
}

template <typename T>
std::vector<T> load_parameters(const TensorStore& store, const ModelConfig& cfg, const ParameterTable& table) {
  std::vector<T> out(size_t(table.total()));
  const QuantizationConfig* q = cfg.quantization ? &*cfg.quantization : nullptr;
  std::vector<float> row;
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const TensorSpec& s = table.specs()[i];
    T* dst = out.data() + table.offset(i);
    if (s.storage == TensorStorage::Vector) {
      const std::vector<float> v = read_f32_vector(store, s);
      for (size_t j = 0; j < v.size(); ++j) dst[j] = T(v[j]);
      continue;
    }
    const LinearWeight w = bind_linear(store, s, q);  // matrices in any format, widened exactly
    row.resize(size_t(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
      w.row_to_f32(r, row.data());
      for (int64_t c = 0; c < w.cols; ++c) dst[r * w.cols + c] = T(row[size_t(c)]);
    }
  }
  return out;
}

template <typename T>
std::vector<TensorData> parameter_tensors(const ParameterTable& table, const T* values, bool skip_routing_bias) {
  std::vector<TensorData> out;
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const TensorSpec& s = table.specs()[i];
    if (skip_routing_bias && s.role == TensorRole::RoutingBias) continue;
    TensorData t;
    t.name = s.name;
    t.dtype = DType::F32;
    t.shape = s.shape;
    t.bytes.resize(size_t(s.numel()) * sizeof(float));
    const T* src = values + table.offset(i);
    for (int64_t j = 0; j < s.numel(); ++j) {
      const float f = float(src[j]);
      std::memcpy(t.bytes.data() + j * sizeof(float), &f, sizeof(float));
    }
    out.push_back(std::move(t));
  }
  return out;
}

template std::vector<float> load_parameters<float>(const TensorStore&, const ModelConfig&, const ParameterTable&);
template std::vector<double> load_parameters<double>(const TensorStore&, const ModelConfig&, const ParameterTable&);
template std::vector<TensorData> parameter_tensors<float>(const ParameterTable&, const float*, bool);
template std::vector<TensorData> parameter_tensors<double>(const ParameterTable&, const double*, bool);

}  // namespace m3::train
