#pragma once
#include <cmath>
#include <cstdint>

namespace m3 {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// SwiGLU-OAI (spec §3.6): gate clamped above only, up clamped both ways, +1 on the up branch.
// gate, up (n) -> out (n)
inline void swigluoai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::fmin(gate[i], limit);
    const float u = std::fmin(std::fmax(up[i], -limit), limit);
    out[i] = g * sigmoid(alpha * g) * (u + 1.0f);
  }
}

}  // namespace m3
