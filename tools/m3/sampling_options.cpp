#include "sampling_options.h"

namespace m3::cli {

void add_sampling_options(CLI::App* cmd, SamplingParams& s) {
  cmd->add_option("--temp", s.temperature, "Temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "Top-p (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", s.min_p, "Min-p (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", s.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  cmd->add_option("--presence-penalty", s.presence_penalty, "Subtracted from the logit of every token already generated (0 = off)")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "Subtracted per earlier occurrence in the output (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", s.seed, "Sampling seed")->capture_default_str();
}

}  // namespace m3::cli
