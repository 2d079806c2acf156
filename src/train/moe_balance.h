#pragma once
// Auxiliary-loss-free MoE balancing (DeepSeek-V3's rule, which M3's e_score_correction_bias
// implements): after each step, every MoE layer's routing bias moves by `rate` toward balance,
// b_e += rate · sign(mean load − load_e). The bias enters the top-k choice only, never the
// weights, so balancing does not bend the function the experts compute.
#include <cstdint>
#include <vector>

#include "train/parameters.h"

namespace m3::train {

// loads[layer][expert]: rows routed in the step (empty for dense layers).
void update_routing_bias(const ParameterTable& table, const std::vector<std::vector<int64_t>>& loads, double rate,
                         std::vector<float>& params);

// max load / mean load of one layer (1 = perfectly balanced).
double load_imbalance(const std::vector<int64_t>& load);

}  // namespace m3::train
