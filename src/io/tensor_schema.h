#pragma once
// The tensor schema: one description, derived from the config, of every tensor a checkpoint of the
// model holds (spec §2): its name, shape, role, the dtype of the bf16 release and how it may be
// stored. Binding (model/text_weights, vision/vision_weights), `m3 make-checkpoint` (the random
// fixtures) and the parameter/byte accounting (count_model) all walk this one list, so a new kind
// of tensor is one new entry here and one case where it is bound.
//
// It lives in io/ (beside ModelConfig) rather than in model/ because both model/ and vision/ bind
// from it and neither may include the other (scripts/check_layers.py).
#include <cstdint>
#include <string>
#include <vector>

#include "m3/dtype.h"
#include "io/model_config.h"

namespace m3 {

enum class TensorRole : uint8_t {
  // text tower (spec §2.1-§2.3)
  Embedding, LmHead, FinalNorm,
  InputNorm, PostAttentionNorm,
  QProj, KProj, VProj, OProj, QNorm, KNorm,
  IndexQProj, IndexKProj, IndexQNorm, IndexKNorm,
  MlpGate, MlpUp, MlpDown,
  RouterGate, RoutingBias,
  ExpertGate, ExpertUp, ExpertDown,  // w1, w3, w2
  SharedGate, SharedUp, SharedDown,
  // vision tower, projector, merger (spec §2.4)
  PatchEmbedding,
  VisionPreNorm, VisionNorm1, VisionNorm2,  // pre_layrnorm, layer_norm1/2 (CLIP LayerNorm)
  VisionQProj, VisionKProj, VisionVProj, VisionOutProj, VisionFc1, VisionFc2,
  ProjectorLinear1, ProjectorLinear2, MergerLinear1, MergerLinear2,
};

// How a tensor may be stored. Linear weights are the matrices the matmul kernels read: any weight
// format of the registry (formats/) can hold them. Everything else is a small vector (norms,
// biases) or a table read row by row, stored as BF16, F16 or F32 and widened once.
enum class TensorStorage : uint8_t { Vector, Linear, RowTable };

// Which part of the model a tensor belongs to (the accounting of `m3 inspect` splits by it).
enum class ModelPart : uint8_t { Text, VisionTower, Projector };  // Projector: projector + merger

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // as stored ([out, in] for matrices; the patch embedding is 5-D)
  TensorRole role;
  TensorStorage storage;
  DType release_dtype;  // dtype in the bf16 release: BF16, or F32 (router, routing bias, patch embedding)
  ModelPart part = ModelPart::Text;
  int layer = -1;       // decoder (or vision encoder) layer; -1 for the others
  int expert = -1;      // routed expert; -1 for the others
  bool bias = false;    // the bias vector of the role's linear or layer norm (vision tower only)

  int64_t numel() const;
  // Rows and columns of a matrix (the patch embedding as [vh, C·T·P·P]).
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return rows() == 0 ? 0 : numel() / rows(); }
};

// Every tensor of the checkpoint, in the order of the spec's listing (text tower first, layer by
// layer; then the vision tower, projector and merger). Validates cfg first.
std::vector<TensorSpec> tensor_schema(const ModelConfig& cfg);
// The parts, for a config already validated: the text tower; the vision tower + projector + merger
// (cfg.vision must be set).
std::vector<TensorSpec> text_tensor_schema(const TextConfig& cfg);
std::vector<TensorSpec> vision_tensor_schema(const ModelConfig& cfg);

const char* tensor_role_name(TensorRole role);

}  // namespace m3
