#pragma once
// The per-row operations between the matmuls: Gemma RMSNorm, the rotary embedding's rotation,
// SwiGLU-OAI and the vision tower's LayerNorm, on the kernels' CPU paths: Highway tables for AVX2,
// AVX-512, NEON and SVE (elementwise_simd.cpp) and plain C++ for the generic path
// (elementwise.cpp). norm.h, rope.h and activations.h are their entry points for the model.
//
// Bits: RMSNorm, LayerNorm and the rotation give the same bits on every path (the norms' double
// sums run in a fixed 8-lane order everywhere; the rotation is a multiply and a subtract or add per
// element, never fused). SwiGLU's sigmoid takes Highway's vector exp (1 ULP) on the SIMD paths and
// libm's exp on the generic one, so the two differ by rounding; the SIMD paths agree with one
// another.
#include <cstdint>

#include "base/cpu_features.h"

namespace m3 {

struct ElementwiseKernels {
  // out = x · (mean(x²) + eps)^(-1/2) · scale for each of `rows` rows of n (in place allowed).
  void (*rmsnorm)(const float* x, const float* scale, int64_t rows, int64_t n, double eps, float* out);
  // For `heads` vectors of head_dim from x: (v[j], v[j + half]) rotated by (c[j], s[j]), j < half.
  void (*rope_rotate)(float* x, const float* c, const float* s, int half, int heads, int head_dim);
  // out = min(gate, limit) · σ(alpha · min(gate, limit)) · (clamp(up, ±limit) + 1) (out may be gate).
  void (*swigluoai)(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);
  // LayerNorm (the vision tower's): out = (x − mean) · (var + eps)^(-1/2) · weight + bias for each
  // of `rows` rows of n, mean and variance from layer_norm_moments_reference (in place allowed).
  void (*layernorm)(const float* x, const float* weight, const float* bias, int64_t rows, int64_t n, double eps,
                    float* out);
};

const ElementwiseKernels& elementwise_kernels();                 // the active path's (M3_CPU applies)
const ElementwiseKernels& elementwise_kernels_at(CpuPath path);  // the best table at or below `path`

// Per target in elementwise_simd.cpp; nullptr where the build has none.
const ElementwiseKernels* simd_elementwise_kernels(CpuPath path);

// The sum of squares of the fixed order every path uses: 8 partial sums in double, x[i] into sum
// i % 8 for the whole groups of 8, then the tail x[8g + t] into sum t, then the tree
// ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)). Each x² is exact in double.
double sum_of_squares_reference(const float* x, int64_t n);

// A row's mean and (biased) variance as every path computes them: Σx and Σx² in double, each in
// sum_of_squares_reference's 8-lane order (every term exact, so fused or not gives the same sums),
// then var = Σx²/n − mean², at least 0. The difference loses digits only when the mean is far above
// the spread, and keeps ~16 − 2·log10(mean/std) of double's digits, far more than fp32 needs.
void layer_norm_moments_reference(const float* x, int64_t n, double& mean, double& var);

}  // namespace m3
