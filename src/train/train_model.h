#pragma once
// The M3 text model in training: forward and backward of the whole tower over a batch of
// sequences (each at positions 0..T-1), on the parameters of a ParameterTable.
//
// Losses (the contract of `m3 grad`, docs/TRAINING.md):
//   L_CE = mean over rows with a target of −log softmax(logits_row)[target]
//   L_KL = Σ over MSA layers of (1 / (G·rows)) Σ_p Σ_g KL(P̄_g(p) ‖ Q_g(p))
// The indexer's parameters (index_q/k_proj, index_q/k_norm) get dL_KL/dw, every other parameter
// dL_CE/dw: the indexer's input is detached and its teacher is too. MSA selections and MoE top-k
// are discrete decisions of the current weights, held fixed in the backward; a caller may also
// pass them in (the finite-difference checks hold them across perturbed weights).
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "io/model_config.h"
#include "train/attention_train.h"
#include "train/op_profile.h"
#include "train/parameters.h"

namespace m3::train {

struct StepOptions {
  // The dense warm-up of the MSA recipe: main attention dense in every layer, and the indexer's KL
  // over each query's whole causal history. Otherwise selection is on and the KL is restricted to
  // the selected blocks.
  bool indexer_warmup = false;
  bool backward = true;         // false: losses only (evaluation)
  bool measure_recall = false;  // indexer recall per layer (costs one dense attention pass)
  bool want_argmax = false;     // StepStats::argmax: each row's most likely next token
  double balance_coef = 0.0;    // the optional sequence-level MoE balance loss (moe_train.h), added to
                                // the backbone's loss in every MoE layer
};

// The discrete decisions of one step: per layer, the block choice of each sequence (MSA layers)
// and the experts of each row (MoE layers, (rows, top_k)).
struct Decisions {
  std::vector<std::vector<BlockChoice>> blocks;  // [layer][sequence]
  std::vector<std::vector<int32_t>> experts;     // [layer]
};

struct StepStats {
  double ce = 0.0;                     // L_CE
  double kl = 0.0;                     // L_KL (sum over layers)
  double balance = 0.0;                // the balance losses (sum over MoE layers; 0 when off)
  int64_t targets = 0;                 // rows that had a target
  std::vector<double> layer_kl;        // per layer (0 for dense layers)
  std::vector<double> layer_recall;    // per layer: mean share of the dense attention mass inside the
                                       // selected blocks, over the rows whose selection is sparse
                                       // (-1: not measured or no such row)
  std::vector<std::vector<int64_t>> expert_load;  // [layer][expert] routed rows (MoE layers)
  std::vector<int32_t> argmax;         // (rows) with want_argmax: argmax of each row's logits
};

template <typename T>
class TrainModel {
 public:
  TrainModel(const ModelConfig& cfg, ThreadPool& pool);

  const TextConfig& config() const { return cfg_; }
  const ParameterTable& table() const { return table_; }

  std::vector<T> params;  // table().total() values
  std::vector<T> grads;   // same layout; forward_backward adds into it (zero it per step)
  OpProfile* profile = nullptr;  // when set, each op's time and matmul FLOPs are added to it

  // tokens, targets (batch, seq): targets < 0 are ignored. decisions: nullptr, or in/out: when
  // `use_given` the choices in it are used, else the step's choices are stored in it.
  StepStats forward_backward(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
                             const StepOptions& options, Decisions* decisions = nullptr, bool use_given = false);

 private:
  TextConfig cfg_;
  ThreadPool& pool_;
  ParameterTable table_;
};

}  // namespace m3::train
