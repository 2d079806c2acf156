#pragma once
// A training recipe (`m3 train --config recipe.json`, docs/TRAINING.md): what model, what data,
// how long and how. Every key is checked: an unknown key, a wrong type or a value out of range is
// a one-line error naming the file and the key.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/optimizer.h"
#include "train/schedule.h"

namespace m3::train {

struct ModelSource {
  std::string dir;     // a model folder (config.json, tokenizer.json, weights), or
  std::string preset;  // a new model of a `m3 make-checkpoint` preset, made by the front end
  std::optional<int> layers, block_size, topk;
  std::string config;  // JSON object of text_config keys for the preset model (hidden_size, ...)
  int tokenizer_merges = 0;  // > 0: a new byte-level BPE vocabulary learned from the training files
  uint64_t seed = 0;
};

struct Recipe {
  std::string source;  // the file it came from (messages)
  ModelSource model;
  std::string init = "fresh";  // "fresh": new weights (init_std); "keep": the folder's weights
  double init_std = 0.02;

  // data: files, or a synthetic task
  std::vector<std::string> files;
  double valid_fraction = 0.05;
  std::string task;             // "" | passkey | multikey | associative-recall
  int64_t task_tokens = 0;      // prompt length of a task example (default: seq_len - 16)
  int64_t task_tokens_min = 0;  // > 0: training examples' lengths uniform in [min, task_tokens]
  bool answer_only = false;     // score only the answer tokens of task examples
  int64_t eval_examples = 64;   // held-out task examples

  int64_t seq_len = 256, batch_size = 4, grad_accum = 1, steps = 100;
  AdamWOptions optimizer;
  ScheduleOptions schedule;     // total_steps = steps
  std::string attention = "msa";     // "msa", or "dense" (the baseline: main attention dense throughout)
  int64_t dense_warmup_steps = 0;    // MSA: steps of the dense warm-up before selection turns on
  double bias_update_rate = 1e-3;    // MoE routing-bias balance rule (0: off)
  double balance_loss = 0.0;         // coefficient of the optional sequence-level balance loss (0: off)
  int64_t eval_every = 100, eval_batches = 4;
  int64_t checkpoint_every = 0;      // 0: only at the end
  std::string out;                   // run folder: log.jsonl, loss.png, checkpoint-N/
  uint64_t seed = 0;
  int threads = 0;

  bool dense_at(int64_t step) const { return attention == "dense" || step < dense_warmup_steps; }
};

Recipe parse_recipe(const std::string& json_text, const std::string& source_name);
Recipe read_recipe(const std::string& path);
// Checks the cross-field rules (after command-line overrides): throws naming the key.
void validate_recipe(const Recipe& r);
std::string recipe_to_json(const Recipe& r);

}  // namespace m3::train
