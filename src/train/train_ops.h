#pragma once
// The text ops of training, each forward beside its backward (spec §3, §4), over row-major
// activations of T = float (training) or T = double (the finite-difference gradient checks). Every
// backward *accumulates* into its parameter gradients (dw += ...) and *writes* its input gradient
// (dx = ...) unless it says otherwise, so a caller zeroes the parameter gradients once per step.
//
// Each op is deterministic: a fixed thread count gives the same bits run to run (the sums run in
// one fixed order per output element).
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace m3::train {

// ---- Gemma RMSNorm (spec §3.2): y = x · (mean(x²) + eps)^-1/2 · (1 + w) ----
// x (rows, n), w (n) -> y (rows, n), inv_rms (rows) saved for the backward.
template <typename T>
void rmsnorm_forward(const T* x, const T* w, int64_t rows, int64_t n, double eps, T* y, T* inv_rms);
// dy (rows, n) -> dx (rows, n) (may alias dy), dw (n) += ...
template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* inv_rms, const T* dy, int64_t rows, int64_t n, T* dx, T* dw);

// ---- partial NeoX RoPE (spec §3.4) ----
// cos/sin of position · theta^(-2j/rotary_dim) for j < rotary_dim/2, angles formed in double.
template <typename T>
struct RopeAngles {
  int rotary_dim = 0;
  std::vector<T> cos, sin;  // (positions, rotary_dim / 2)
  RopeAngles(double theta, int rotary_dim, const int64_t* positions, int64_t count);
};
// In place on x (rows, heads, dim), row i at the angles' row i. inverse: rotate by -angle (the
// backward of the rotation, which is orthogonal).
template <typename T>
void rope_rotate(const RopeAngles<T>& angles, T* x, int64_t rows, int heads, int dim, bool inverse);

// ---- SwiGLU-OAI (spec §3.6) ----
// gate, up (n) -> out (n)
template <typename T>
void swigluoai_forward(const T* gate, const T* up, int64_t n, double alpha, double limit, T* out);
// dout (n) -> dgate, dup (n). The clamps pass no gradient outside [−limit, limit].
template <typename T>
void swigluoai_backward(const T* gate, const T* up, const T* dout, int64_t n, double alpha, double limit, T* dgate,
                        T* dup);

// ---- linear: y = x · Wᵀ, W (out, in) as PyTorch stores it ----
// x (rows, in), w (out, in) -> y (rows, out). float runs on the engine's matmul kernels.
template <typename T>
void linear_forward(ThreadPool& pool, const T* x, const T* w, int64_t rows, int64_t in, int64_t out, T* y);
// dy (rows, out) -> dx (rows, in) (+= when accumulate_dx; nullptr: not wanted), dw (out, in) += dyᵀ · x
// (nullptr: not wanted).
template <typename T>
void linear_backward(ThreadPool& pool, const T* x, const T* w, const T* dy, int64_t rows, int64_t in, int64_t out,
                     T* dx, T* dw, bool accumulate_dx = false);

// ---- embedding ----
// dx (rows, hidden) scattered into dtable (vocab, hidden) += at each row's token.
template <typename T>
void embedding_backward(const int32_t* tokens, const T* dx, int64_t rows, int64_t hidden, T* dtable);

// ---- cross-entropy ----
// Mean over rows with target >= 0 of -log softmax(logits_row)[target] (rows with target < 0 are
// ignored). logits (rows, vocab) -> returns the loss; dlogits (rows, vocab) = its gradient
// (softmax − onehot) / count, zero on ignored rows. dlogits may alias logits. Rows run in parallel;
// the loss sums the rows in order.
template <typename T>
double cross_entropy(ThreadPool& pool, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                     T* dlogits);

}  // namespace m3::train
