#pragma once
// The feed-forward blocks in training: the SwiGLU-OAI MLP (dense layers, the shared expert, each
// routed expert) and the mixture of experts around it (spec §3.5): fp32 sigmoid router, top-k by
// score + bias (the bias steers selection only and gets no gradient), weights s_e / Σ s · scale,
// unscaled shared expert. The top-k choice is a discrete decision: held fixed in the backward.
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace m3::train {

template <typename T>
struct FfnParams {  // one SwiGLU-OAI MLP: down(act(gate·x, up·x)); gate/up (width, hidden), down (hidden, width)
  const T* gate = nullptr;
  const T* up = nullptr;
  const T* down = nullptr;
  int64_t width = 0;
};
template <typename T>
struct FfnGrads {
  T* gate = nullptr;
  T* up = nullptr;
  T* down = nullptr;
};

template <typename T>
struct FfnSaved {  // what the backward needs, (rows, width) each
  std::vector<T> gate, up, act;
};

struct FfnShape {
  int64_t hidden = 0;
  double alpha = 1.702, limit = 7.0;
};

// x (rows, hidden) -> out (rows, hidden)
template <typename T>
void ffn_forward(ThreadPool& pool, const FfnShape& s, const FfnParams<T>& w, const T* x, int64_t rows, FfnSaved<T>& saved,
                 T* out);
// dout (rows, hidden) -> dx (rows, hidden) (+= when accumulate_dx), weight gradients +=.
template <typename T>
void ffn_backward(ThreadPool& pool, const FfnShape& s, const FfnParams<T>& w, const FfnGrads<T>& g, const T* x,
                  int64_t rows, const FfnSaved<T>& saved, const T* dout, T* dx, bool accumulate_dx);

struct MoeShape {
  FfnShape ffn;
  int experts = 0, top_k = 0;
  double routed_scaling = 1.0;
  // The optional sequence-level balance loss (DeepSeek-V3's complementary loss): per sequence of
  // `seq` rows, balance_coef · Σ_e f_e·P_e with f_e = E/(K·seq) · (rows routed to e) and
  // P_e = mean over the rows of s_e / Σ_j s_j. 0: off (M3's recipe balances with the bias alone).
  double balance_coef = 0.0;
  int64_t seq = 0;
};

template <typename T>
struct MoeParams {
  const T* router = nullptr;  // (experts, hidden)
  const T* bias = nullptr;    // (experts) e_score_correction_bias; nullptr: none
  std::vector<FfnParams<T>> experts;
  bool has_shared = false;
  FfnParams<T> shared;
};
template <typename T>
struct MoeGrads {
  T* router = nullptr;
  std::vector<FfnGrads<T>> experts;
  FfnGrads<T> shared;
};

template <typename T>
struct MoeSaved {
  std::vector<T> score;        // (rows, experts) sigmoid of the router logits
  std::vector<int32_t> chosen;  // (rows, top_k) expert ids, in the router's order
  std::vector<T> weight;       // (rows, top_k)
  struct Expert {
    std::vector<int32_t> rows, slots;  // rows of x routed here (ascending) and their slot r·top_k + i
    std::vector<T> x, out;             // gathered input (m, hidden), output (m, hidden)
    FfnSaved<T> ffn;
  };
  std::vector<Expert> expert;
  FfnSaved<T> shared;
  std::vector<T> shared_out;
  double balance_loss = 0.0;  // mean over the sequences (0 when balance_coef is 0)
};

// x (rows, hidden) -> out (rows, hidden). fixed_choice (rows, top_k) replaces the router's top-k
// (the gradient checks hold decisions fixed); nullptr: choose.
template <typename T>
void moe_forward(ThreadPool& pool, const MoeShape& s, const MoeParams<T>& w, const T* x, int64_t rows,
                 const int32_t* fixed_choice, MoeSaved<T>& saved, T* out);
// dout (rows, hidden) -> dx (rows, hidden) (written), parameter gradients +=; with balance_coef,
// the balance loss's gradient (weight 1) joins the router's.
template <typename T>
void moe_backward(ThreadPool& pool, const MoeShape& s, const MoeParams<T>& w, const MoeGrads<T>& g, const T* x,
                  int64_t rows, const MoeSaved<T>& saved, const T* dout, T* dx);

}  // namespace m3::train
