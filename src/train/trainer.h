#pragma once
// The training run behind `m3 train` (docs/TRAINING.md): a recipe's model and data, AdamW with its
// schedule and clipping, the MSA dense warm-up then the sparse stage, the MoE balance rule,
// evaluation on the held-out split, a JSONL log, loss curves, and checkpoints in the Hugging Face
// layout that `m3 generate` / `m3 serve` load as they are (F32 weights) plus the optimizer and data
// state, from which a resumed run continues bit for bit.
#include <cstdint>
#include <functional>
#include <string>

#include "base/thread_pool.h"
#include "train/recipe.h"

namespace m3::train {

struct Progress {
  int64_t step = 0, steps = 0;  // steps done, of
  double loss = 0.0, tokens_per_s = 0.0, elapsed_s = 0.0, eta_s = 0.0;
  bool dense = false;           // in the dense (warm-up or baseline) stage
};

struct TrainHooks {
  std::function<void(const Progress&)> progress;        // after every step
  std::function<void(const std::string&)> message;      // one line: evals, checkpoints, warnings
};

// Runs r from the start, or from a checkpoint folder written by an earlier run (`resume`). The
// model folder in r.model.dir must exist (front ends make preset models first).
void run_training(const Recipe& r, const std::string& resume, ThreadPool& pool, const TrainHooks& hooks);

}  // namespace m3::train
