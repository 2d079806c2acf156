#pragma once
// How the next token is chosen (the runtime's Sampler applies it): greedy when temperature is 0;
// otherwise repetition penalty -> presence/frequency penalties -> logit_bias -> top-k ->
// temperature -> top-p -> min-p -> a seeded, reproducible draw.
#include <cstdint>
#include <utility>
#include <vector>

namespace m3 {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1: off; CTRL-style: divide positive logits, multiply negative
  int repetition_window = 256;      // how many recent tokens the penalty looks at
  // OpenAI's: logit[t] -= frequency_penalty * count[t] + presence_penalty * (count[t] > 0), count
  // over the generated tokens so far. 0: off; each in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to the logit after the penalties and
  // before the draw (greedy too). -100 in practice bans a token, +100 forces it. Ids past the
  // sampled vocabulary are refused by the caller, which knows the tokenizer; here they are skipped.
  std::vector<std::pair<int32_t, float>> logit_bias;

  void validate() const;  // throws m3::Error naming the bad field
};

// The release's published sampling defaults (MiniMax-M3's generation_config.json and model card:
// temperature 1.0, top-p 0.95, top-k 40): what generate, chat and serve use when neither the
// checkpoint's generation_config.json nor the user says otherwise (docs/CLI.md).
inline SamplingParams published_default_sampling() {
  SamplingParams s;
  s.temperature = 1.0f;
  s.top_p = 0.95f;
  s.top_k = 40;
  return s;
}

}  // namespace m3
