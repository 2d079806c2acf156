#pragma once
// The vision tower, projector and merger weights (spec §2.4), bound to the memory-mapped
// checkpoint. Matrices stay in the file in their stored dtype (patch embedding fp32, the rest
// bf16 in the release); biases and LayerNorm vectors are widened to fp32 once at load time.
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "format/linear_weight.h"

namespace m3::vision {

struct Linear {  // y = x·Wᵀ + b
  LinearWeight w;
  std::vector<float> b;  // (w.rows)
};

struct LayerNormWeights {  // CLIP LayerNorm: (x - mean)/sqrt(var + eps) · weight + bias
  std::vector<float> weight, bias;
};

struct VisionLayerWeights {
  LayerNormWeights ln1, ln2;
  Linear q, k, v, out;  // [vh, vh] each, with bias
  Linear fc1, fc2;      // [vi, vh], [vh, vi]
};

struct VisionWeights {
  // Conv3d weight [vh, C, tp, P, P] seen as a [vh, C·tp·P·P] matrix: its (c, tp, ph, pw) order is
  // the order of the 1176 values inside a pixel_values row, so the conv is one GEMM.
  LinearWeight patch_embedding;
  LayerNormWeights pre_layrnorm;
  std::vector<VisionLayerWeights> layers;
  Linear projector_1, projector_2;  // multi_modal_projector: vh -> P -> P
  Linear merger_1, merger_2;        // patch_merge_mlp: P·merge² -> P -> P
};

// Every tensor of spec §2.4 the config implies. Throws m3::Error naming the tensor when one is
// missing, has another shape than the config implies, or has an unsupported dtype; also when the
// config has no vision_config.
VisionWeights bind_vision_weights(const TensorStore& store, const ModelConfig& cfg);

}  // namespace m3::vision
