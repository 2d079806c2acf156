#pragma once
// AdamW over the flat parameter array (fp32 master weights, fp32 moments), in two groups clipped
// separately: the backbone (learning from the LM loss) and the MSA index branch (learning from the
// indexer KL), so that one objective's gradient scale never throttles the other's. Weight decay is
// off for norms, biases and the routing bias (which is not optimized at all: the balance rule of
// moe_balance.h moves it).
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "train/parameters.h"

namespace m3::train {

struct AdamWOptions {
  double lr = 1e-3;            // peak learning rate (the schedule scales it)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;   // decoupled, on matrices only
  double clip = 1.0;           // global gradient norm of the backbone group (0: off)
  double indexer_clip = 1.0;   // global gradient norm of the index branch (0: off)
  double indexer_lr_scale = 1.0;  // the index branch's lr relative to the backbone's
};

enum class ParamGroup : uint8_t { Backbone, Indexer, Frozen };

// Which group a tensor belongs to, and whether it decays.
ParamGroup param_group(TensorRole role);
bool param_decays(const TensorSpec& spec);

struct ClipReport {
  double backbone_norm = 0.0, indexer_norm = 0.0;  // before clipping
};

class AdamW {
 public:
  AdamW(const ParameterTable& table, const AdamWOptions& options);

  // One update with learning rate `lr` (the schedule's value): clips each group's gradient to its
  // norm, then params -= lr·(m̂ / (√v̂ + eps) + wd·params). grads are left clipped.
  // Runs on `pool` in fixed blocks, so the bits do not depend on the thread count.
  ClipReport step(ThreadPool& pool, std::vector<float>& params, std::vector<float>& grads, double lr);

  int64_t steps() const { return t_; }
  // The state, for checkpoints: m, v (one value per parameter) and the step count.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  void set_steps(int64_t t) { t_ = t; }
  const AdamWOptions& options() const { return o_; }

 private:
  const ParameterTable& table_;
  AdamWOptions o_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace m3::train
