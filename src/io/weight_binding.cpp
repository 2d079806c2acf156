#include "io/weight_binding.h"

#include <algorithm>
#include <string>

#include "m3/error.h"

namespace m3 {

namespace {

// "<module>.weight" -> "<module>." (side tensors are named "<module>.<suffix>").
std::string module_prefix(const std::string& weight_name) {
  const std::string suffix = "weight";
  if (weight_name.size() >= suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name + ".";
}

// "bf16 (BF16), ..., mxfp8 (F8_E4M3 + weight_scale_inv)" for errors.
std::string format_names() {
  std::string s;
  for (const WeightFormat* f : weight_formats()) {
    if (!s.empty()) s += ", ";
    s += f->name + " (" + std::string(dtype_name(f->element)) + (f->side.empty() ? "" : " + ");
    for (size_t i = 0; i < f->side.size(); ++i) s += (i ? ", " : "") + f->side[i].suffix;
    s += ")";
  }
  return s;
}

}  // namespace

LinearWeight bind_linear(const TensorStore& store, const TensorSpec& spec, const QuantizationConfig* quantization) {
  M3_CHECK(spec.storage != TensorStorage::Vector, spec.name, ": a vector, not a linear weight");
  const TensorView* t = &store.get(spec.name);  // throws the store's "missing tensor" error
  const int64_t rows = spec.rows(), cols = spec.cols();
  const std::string prefix = module_prefix(spec.name);

  const WeightFormat* format = dense_format(t->dtype);
  if (format == nullptr) {
    // Formats that share a main dtype and side tensors (the affine ones: U32 + scales + biases)
    // differ in packing and group: the shapes say which one this is.
    auto sides_named = [&](const WeightFormat& f) {
      return std::all_of(f.side.begin(), f.side.end(),
                         [&](const SideTensorSpec& s) { return store.find(prefix + s.suffix) != nullptr; });
    };
    auto shapes_fit = [&](const WeightFormat& f) {
      if (!sides_named(f) || cols % f.block_cols != 0 || cols % f.weights_per_element != 0) return false;
      if (t->shape != std::vector<int64_t>{rows, f.stored_cols(cols)}) return false;
      for (const SideTensorSpec& s : f.side) {
        const TensorView* side = store.find(prefix + s.suffix);
        if (side->dtype != s.dtype || side->shape != std::vector<int64_t>{rows, cols / f.block_cols * s.per_block})
          return false;
      }
      return true;
    };
    format = match_weight_format(t->dtype, shapes_fit);
    // None fits: bind the likeliest one, whose checks below name the tensor that is off.
    if (format == nullptr) format = match_weight_format(t->dtype, sides_named);
  }
  M3_CHECK(format != nullptr, store.source(), ": tensor ", spec.name, " has dtype ", dtype_name(t->dtype),
           ", expected BF16, F16 or F32, or the main tensor of a weight format: ", format_names());
  M3_CHECK(cols % format->block_cols == 0 && cols % format->weights_per_element == 0, store.source(), ": tensor ",
           spec.name, ": ", cols, " columns do not divide into ", format->name, " blocks of ", format->block_cols);

  LinearWeight w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  if (format->dense()) {
    w.data = store.get(spec.name, spec.shape).data;
  } else {
    w.data = store.get(spec.name, {rows, format->stored_cols(cols)}).data;
    for (size_t i = 0; i < format->side.size(); ++i) {
      const SideTensorSpec& s = format->side[i];
      const std::string name = prefix + s.suffix;
      const TensorView& side = store.get(name, {rows, cols / format->block_cols * s.per_block});
      M3_CHECK(side.dtype == s.dtype, store.source(), ": tensor ", name, " has dtype ", dtype_name(side.dtype),
               ", expected ", dtype_name(s.dtype), " (", format->name, " side tensor of ", spec.name, ")");
      w.side[i] = side.data;
    }
  }
  if (const std::optional<AffineParams> a = affine_params(*format); a && quantization != nullptr) {
    const std::string module = prefix.substr(0, prefix.size() - 1);
    const QuantizationConfig::Module m = quantization->expected(module);
    if (!m.quantized || m.bits != a->bits || m.group_size != a->group)
      fail(store.source(), ": tensor ", spec.name, " is ", a->bits, "-bit affine in groups of ", a->group,
           ", but config.json's quantization says ",
           m.quantized ? std::to_string(m.bits) + "-bit in groups of " + std::to_string(m.group_size) : "unquantized",
           " for ", module);
  }

  return w;
}

std::vector<float> read_f32_vector(const TensorStore& store, const TensorSpec& spec) {
  const TensorView& t = store.get(spec.name, spec.shape);
  M3_CHECK(dense_format(t.dtype) != nullptr, store.source(), ": tensor ", spec.name, " has dtype ",
           dtype_name(t.dtype), ", expected BF16, F16 or F32");
  std::vector<float> out(static_cast<size_t>(spec.numel()));
  dense_weight(t.dtype, t.data, 1, spec.numel()).row_to_f32(0, out.data());
  return out;
}

}  // namespace m3
