#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/elementwise.h"

namespace m3 {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// SwiGLU-OAI (spec §3.6): gate clamped above only, up clamped both ways, +1 on the up branch, on
// the active CPU path (kernels/elementwise.h).
// gate, up (n) -> out (n)
inline void swigluoai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  elementwise_kernels().swigluoai(gate, up, n, alpha, limit, out);
}

}  // namespace m3
