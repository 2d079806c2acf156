#pragma once
// Turns logits into the next token (SamplingParams: m3/sampling.h). Greedy when temperature is 0;
// otherwise the usual chain:
// repetition penalty -> presence/frequency penalties -> logit_bias -> top-k -> temperature -> top-p -> min-p ->
// draw (seeded, reproducible).
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "m3/sampling.h"

namespace m3 {

class Sampler {
 public:
  explicit Sampler(SamplingParams p);
  // logits (vocab); history = tokens so far (prompt + generated) for the repetition penalty;
  // history[output_start..] are the generated ones (presence and frequency penalties).
  int32_t sample(const float* logits, int vocab, const std::vector<int32_t>& history, size_t output_start);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<int32_t> ids_;
};

int32_t argmax(const float* logits, int vocab);  // ties -> smaller id

}  // namespace m3
