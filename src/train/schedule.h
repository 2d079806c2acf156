#pragma once
// Learning-rate schedules: linear warm-up, then cosine decay to min_lr_ratio · peak at the last
// step ("cosine"), or constant with a linear cooldown over the last cooldown_steps ("constant"
// + cooldown, the warmup-stable-decay shape).
#include <cstdint>
#include <string>

namespace m3::train {

struct ScheduleOptions {
  std::string kind = "cosine";  // "cosine" | "constant"
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  int64_t cooldown_steps = 0;   // "constant" only
  double min_lr_ratio = 0.1;
};

// The learning rate of step `step` (0-based) for peak learning rate `peak`.
double learning_rate(const ScheduleOptions& s, double peak, int64_t step);

}  // namespace m3::train
