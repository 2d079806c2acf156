#include "vision/vision_weights.h"

#include <string>

#include "base/error.h"

namespace m3::vision {

namespace {

void check_dtype(const TensorStore& store, const TensorView& t) {
  M3_CHECK(t.dtype == DType::BF16 || t.dtype == DType::F16 || t.dtype == DType::F32, store.source(), ": tensor ",
           t.name, " has dtype ", dtype_name(t.dtype), ", expected BF16, F16 or F32");
}

std::vector<float> vec(const TensorStore& store, const std::string& name, int64_t n) {
  const TensorView& t = store.get(name, {n});
  check_dtype(store, t);
  std::vector<float> out(static_cast<size_t>(n));
  WeightMatrix{t.dtype, t.data, 1, n}.row_to_f32(0, out.data());
  return out;
}

WeightMatrix matrix(const TensorStore& store, const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = store.get(name, {rows, cols});
  check_dtype(store, t);
  return WeightMatrix{t.dtype, t.data, rows, cols};
}

Linear linear(const TensorStore& store, const std::string& prefix, int64_t out, int64_t in) {
  return Linear{matrix(store, prefix + ".weight", out, in), vec(store, prefix + ".bias", out)};
}

LayerNormWeights layer_norm(const TensorStore& store, const std::string& prefix, int64_t n) {
  return LayerNormWeights{vec(store, prefix + ".weight", n), vec(store, prefix + ".bias", n)};
}

}  // namespace

VisionWeights bind_vision_weights(const TensorStore& store, const ModelConfig& cfg) {
  M3_CHECK(cfg.vision.has_value(), cfg.source, ": the model has no vision tower (no vision_config)");
  const VisionConfig& v = *cfg.vision;
  const int64_t vh = v.hidden_size, vi = v.intermediate_size, P = cfg.projector_hidden_size;
  const int64_t merge2 = int64_t(v.spatial_merge_size) * v.spatial_merge_size;
  const std::string vm = "vision_tower.vision_model.";
  VisionWeights w;

  const std::string pe = vm + "embeddings.patch_embedding.weight";
  const TensorView& t = store.get(pe, {vh, v.num_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  check_dtype(store, t);
  w.patch_embedding = WeightMatrix{t.dtype, t.data, vh, v.patch_input_dim()};

  w.pre_layrnorm = layer_norm(store, vm + "pre_layrnorm", vh);
  for (int l = 0; l < v.num_hidden_layers; ++l) {
    const std::string p = vm + "encoder.layers." + std::to_string(l) + ".";
    VisionLayerWeights lw;
    lw.ln1 = layer_norm(store, p + "layer_norm1", vh);
    lw.ln2 = layer_norm(store, p + "layer_norm2", vh);
    lw.q = linear(store, p + "self_attn.q_proj", vh, vh);
    lw.k = linear(store, p + "self_attn.k_proj", vh, vh);
    lw.v = linear(store, p + "self_attn.v_proj", vh, vh);
    lw.out = linear(store, p + "self_attn.out_proj", vh, vh);
    lw.fc1 = linear(store, p + "mlp.fc1", vi, vh);
    lw.fc2 = linear(store, p + "mlp.fc2", vh, vi);
    w.layers.push_back(std::move(lw));
  }
  w.projector_1 = linear(store, "multi_modal_projector.linear_1", P, vh);
  w.projector_2 = linear(store, "multi_modal_projector.linear_2", P, P);
  w.merger_1 = linear(store, "patch_merge_mlp.linear_1", P, P * merge2);
  w.merger_2 = linear(store, "patch_merge_mlp.linear_2", P, P);
  return w;
}

}  // namespace m3::vision
