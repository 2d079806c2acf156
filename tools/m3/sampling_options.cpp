#include "sampling_options.h"

#include "usage.h"

namespace m3::cli {

void add_sampling_options(CLI::App* cmd, SamplingParams& s) {
  cmd->add_option("--temp", s.temperature, "Temperature (0 = greedy; default: the model's, docs/CLI.md)")->check(NonNegative());
  cmd->add_option("--top-k", s.top_k, "Top-k (0 = off; default: the model's)")->check(NonNegative());
  cmd->add_option("--top-p", s.top_p, "Top-p (1 = off; default: the model's)")->check(InRange(0, 1));
  cmd->add_option("--min-p", s.min_p, "Min-p (0 = off)")->check(InRange(0, 1));
  cmd->add_option("--repeat-penalty", s.repetition_penalty, "Repetition penalty (1 = off)");
  cmd->add_option("--presence-penalty", s.presence_penalty, "Subtracted from the logit of every token already generated (0 = off)");
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "Subtracted per earlier occurrence in the output (0 = off)");
  cmd->add_option("-s,--seed", s.seed, "Sampling seed")->capture_default_str();
}

SamplingParams resolve_sampling(const CLI::App* cmd, const SamplingParams& parsed, const SamplingParams& defaults) {
  SamplingParams s = defaults;
  auto given = [&](const char* name) { return cmd->count(name) > 0; };
  if (given("--temp")) s.temperature = parsed.temperature;
  if (given("--top-k")) s.top_k = parsed.top_k;
  if (given("--top-p")) s.top_p = parsed.top_p;
  if (given("--min-p")) s.min_p = parsed.min_p;
  if (given("--repeat-penalty")) s.repetition_penalty = parsed.repetition_penalty;
  if (given("--presence-penalty")) s.presence_penalty = parsed.presence_penalty;
  if (given("--frequency-penalty")) s.frequency_penalty = parsed.frequency_penalty;
  s.seed = parsed.seed;
  s.logit_bias = parsed.logit_bias;
  s.validate();
  return s;
}

}  // namespace m3::cli
