#pragma once
// Partial NeoX rotary embedding (spec §3.4): dims [0, rotary_dim) rotate in pairs (j, j + rotary_dim/2)
// with θ_j = theta^(-2j/rotary_dim); the remaining dims pass through.
#include <cstdint>
#include <vector>

namespace m3 {

// cos/sin of position·θ_j for a run of positions. Angles are formed in double: at position 10⁶ an
// fp32 product would already be off by ~0.06 rad.
class RopeTable {
 public:
  RopeTable(double theta, int rotary_dim) : theta_(theta), rotary_dim_(rotary_dim) {}
  void build(const int64_t* positions, int64_t count);  // rows for these positions
  int rotary_dim() const { return rotary_dim_; }
  // Rotates `heads` vectors of length head_dim that belong to row i (i indexes the build() positions).
  void apply(float* x, int64_t i, int heads, int head_dim) const;

 private:
  double theta_;
  int rotary_dim_;
  std::vector<float> cos_, sin_;  // (count, rotary_dim/2)
};

}  // namespace m3
