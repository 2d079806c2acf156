#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace m3::train {

double learning_rate(const ScheduleOptions& s, double peak, int64_t step) {
  if (step < s.warmup_steps) return peak * double(step + 1) / double(s.warmup_steps);
  const double floor = peak * s.min_lr_ratio;
  if (s.kind == "constant") {
    const int64_t start = s.total_steps - s.cooldown_steps;
    if (s.cooldown_steps <= 0 || step < start) return peak;
    const double f = std::min(1.0, double(step - start + 1) / double(s.cooldown_steps));
    return peak + (floor - peak) * f;
  }
  const int64_t span = std::max<int64_t>(1, s.total_steps - s.warmup_steps - 1);
  const double f = std::min(1.0, double(step - s.warmup_steps) / double(span));
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * f));
}

}  // namespace m3::train
