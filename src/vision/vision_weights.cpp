#include "vision/vision_weights.h"

#include <string>

#include "m3/error.h"
#include "io/tensor_schema.h"
#include "io/weight_binding.h"

namespace m3::vision {

namespace {

LinearWeight matrix(const TensorStore& store, const TensorSpec& s) { return bind_linear(store, s); }
std::vector<float> vec(const TensorStore& store, const TensorSpec& s) { return read_f32_vector(store, s); }

}  // namespace

VisionWeights bind_vision_weights(const TensorStore& store, const ModelConfig& cfg) {
  using R = TensorRole;
  const std::vector<TensorSpec> schema = vision_tensor_schema(cfg);  // fails without a vision_config
  VisionWeights w;
  w.layers.resize(size_t(cfg.vision->num_hidden_layers));
  for (const TensorSpec& s : schema) {
    VisionLayerWeights* lw = s.layer >= 0 ? &w.layers[size_t(s.layer)] : nullptr;
    if (s.role == R::PatchEmbedding) {
      w.patch_embedding = matrix(store, s);
      continue;
    }
    LayerNormWeights* norm = s.role == R::VisionPreNorm ? &w.pre_layrnorm
                             : s.role == R::VisionNorm1 ? &lw->ln1
                             : s.role == R::VisionNorm2 ? &lw->ln2
                                                        : nullptr;
    if (norm != nullptr) {
      (s.bias ? norm->bias : norm->weight) = vec(store, s);
      continue;
    }
    Linear* linear = nullptr;
    switch (s.role) {
      case R::VisionQProj: linear = &lw->q; break;
      case R::VisionKProj: linear = &lw->k; break;
      case R::VisionVProj: linear = &lw->v; break;
      case R::VisionOutProj: linear = &lw->out; break;
      case R::VisionFc1: linear = &lw->fc1; break;
      case R::VisionFc2: linear = &lw->fc2; break;
      case R::ProjectorLinear1: linear = &w.projector_1; break;
      case R::ProjectorLinear2: linear = &w.projector_2; break;
      case R::MergerLinear1: linear = &w.merger_1; break;
      case R::MergerLinear2: linear = &w.merger_2; break;
      default: fail(s.name, ": ", tensor_role_name(s.role), " is not a vision-tower tensor");
    }
    if (s.bias) linear->b = vec(store, s);
    else linear->w = matrix(store, s);
  }
  return w;
}

}  // namespace m3::vision
