#include "train/moe_balance.h"

#include <algorithm>

namespace m3::train {

void update_routing_bias(const ParameterTable& table, const std::vector<std::vector<int64_t>>& loads, double rate,
                         std::vector<float>& params) {
  for (size_t l = 0; l < loads.size(); ++l) {
    const std::vector<int64_t>& load = loads[l];
    if (load.empty() || !table.has(TensorRole::RoutingBias, int(l))) continue;
    double mean = 0.0;
    for (int64_t n : load) mean += double(n);
    mean /= double(load.size());
    float* bias = params.data() + table.at(TensorRole::RoutingBias, int(l));
    for (size_t e = 0; e < load.size(); ++e) {
      const double d = mean - double(load[e]);
      bias[e] += float(d > 0 ? rate : d < 0 ? -rate : 0.0);
    }
  }
}

double load_imbalance(const std::vector<int64_t>& load) {
  if (load.empty()) return 1.0;
  double mean = 0.0;
  for (int64_t n : load) mean += double(n);
  mean /= double(load.size());
  return mean > 0 ? double(*std::max_element(load.begin(), load.end())) / mean : 1.0;
}

}  // namespace m3::train
