#include "train/moe_train.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "train/train_ops.h"

namespace m3::train {

template <typename T>
void ffn_forward(ThreadPool& pool, const FfnShape& s, const FfnParams<T>& w, const T* x, int64_t rows, FfnSaved<T>& saved,
                 T* out) {
  const int64_t n = rows * w.width;
  saved.gate.resize(static_cast<size_t>(n));
  saved.up.resize(static_cast<size_t>(n));
  saved.act.resize(static_cast<size_t>(n));
  linear_forward(pool, x, w.gate, rows, s.hidden, w.width, saved.gate.data());
  linear_forward(pool, x, w.up, rows, s.hidden, w.width, saved.up.data());
  swigluoai_forward(saved.gate.data(), saved.up.data(), n, s.alpha, s.limit, saved.act.data());
  linear_forward(pool, saved.act.data(), w.down, rows, w.width, s.hidden, out);
}

template <typename T>
void ffn_backward(ThreadPool& pool, const FfnShape& s, const FfnParams<T>& w, const FfnGrads<T>& g, const T* x,
                  int64_t rows, const FfnSaved<T>& saved, const T* dout, T* dx, bool accumulate_dx) {
  const int64_t n = rows * w.width;
  std::vector<T> dact(static_cast<size_t>(n)), dgate(static_cast<size_t>(n)), dup(static_cast<size_t>(n));
  linear_backward(pool, saved.act.data(), w.down, dout, rows, w.width, s.hidden, dact.data(), g.down);
  swigluoai_backward(saved.gate.data(), saved.up.data(), dact.data(), n, s.alpha, s.limit, dgate.data(), dup.data());
  linear_backward(pool, x, w.gate, dgate.data(), rows, s.hidden, w.width, dx, g.gate, accumulate_dx);
  linear_backward(pool, x, w.up, dup.data(), rows, s.hidden, w.width, dx, g.up, true);
}

template <typename T>
void moe_forward(ThreadPool& pool, const MoeShape& s, const MoeParams<T>& w, const T* x, int64_t rows,
                 const int32_t* fixed_choice, MoeSaved<T>& saved, T* out) {
  const int E = s.experts, K = s.top_k;
  const int64_t H = s.ffn.hidden;
  std::vector<T> logits(size_t(rows * E));
  linear_forward(pool, x, w.router, rows, H, E, logits.data());
  saved.score.resize(size_t(rows * E));
  saved.chosen.resize(size_t(rows * K));
  saved.weight.resize(size_t(rows * K));
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::vector<T> choice(static_cast<size_t>(E));
  for (int64_t r = 0; r < rows; ++r) {
    T* sc = saved.score.data() + r * E;
    for (int e = 0; e < E; ++e) {
      sc[e] = T(1) / (T(1) + std::exp(-logits[size_t(r * E + e)]));
      choice[size_t(e)] = sc[e] + (w.bias ? w.bias[e] : T(0));  // the bias steers selection only
    }
    int32_t* ids = saved.chosen.data() + r * K;
    if (fixed_choice != nullptr) {
      std::copy_n(fixed_choice + r * K, K, ids);
    } else {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
        return choice[size_t(a)] > choice[size_t(b)] || (choice[size_t(a)] == choice[size_t(b)] && a < b);
      });
      std::copy_n(order.begin(), K, ids);
    }
    double sum = 0.0;
    for (int i = 0; i < K; ++i) sum += double(sc[ids[i]]);
    for (int i = 0; i < K; ++i) saved.weight[size_t(r * K + i)] = T(double(sc[ids[i]]) / sum * s.routed_scaling);
  }

  // The sequence-level balance loss, per sequence of s.seq rows.
  saved.balance_loss = 0.0;
  if (s.balance_coef > 0) {
    const int64_t seq = s.seq > 0 ? s.seq : rows;
    for (int64_t r0 = 0; r0 < rows; r0 += seq) {
      std::vector<double> f(static_cast<size_t>(E), 0.0), prob(static_cast<size_t>(E), 0.0);
      for (int64_t r = r0; r < r0 + seq; ++r) {
        const T* sc = saved.score.data() + r * E;
        double sum = 0.0;
        for (int e = 0; e < E; ++e) sum += double(sc[e]);
        for (int e = 0; e < E; ++e) prob[size_t(e)] += double(sc[e]) / sum / double(seq);
        for (int i = 0; i < K; ++i) f[size_t(saved.chosen[size_t(r * K + i)])] += double(E) / (double(K) * double(seq));
      }
      for (int e = 0; e < E; ++e) saved.balance_loss += s.balance_coef * f[size_t(e)] * prob[size_t(e)];
    }
    saved.balance_loss /= double(rows / seq);
  }

  saved.expert.assign(static_cast<size_t>(E), {});
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < K; ++i) {
      auto& ex = saved.expert[size_t(saved.chosen[size_t(r * K + i)])];
      ex.rows.push_back(int32_t(r));
      ex.slots.push_back(int32_t(r * K + i));
    }
  for (int e = 0; e < E; ++e) {
    auto& ex = saved.expert[size_t(e)];
    const int64_t m = int64_t(ex.rows.size());
    if (m == 0) continue;
    ex.x.resize(size_t(m * H));
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + int64_t(ex.rows[size_t(i)]) * H, H, ex.x.data() + i * H);
    ex.out.resize(size_t(m * H));
    ffn_forward(pool, s.ffn, w.experts[size_t(e)], ex.x.data(), m, ex.ffn, ex.out.data());
  }
  if (w.has_shared) {
    saved.shared_out.resize(size_t(rows * H));
    ffn_forward(pool, s.ffn, w.shared, x, rows, saved.shared, saved.shared_out.data());
    std::copy(saved.shared_out.begin(), saved.shared_out.end(), out);
  } else {
    std::fill_n(out, rows * H, T(0));
  }
  // Combine in ascending expert id per row (each row's entries are added expert by expert).
  for (int e = 0; e < E; ++e) {
    const auto& ex = saved.expert[size_t(e)];
    for (size_t i = 0; i < ex.rows.size(); ++i) {
      const T wt = saved.weight[size_t(ex.slots[i])];
      T* o = out + int64_t(ex.rows[i]) * H;
      const T* eo = ex.out.data() + int64_t(i) * H;
      for (int64_t d = 0; d < H; ++d) o[d] += wt * eo[d];
    }
  }
}

template <typename T>
void moe_backward(ThreadPool& pool, const MoeShape& s, const MoeParams<T>& w, const MoeGrads<T>& g, const T* x,
                  int64_t rows, const MoeSaved<T>& saved, const T* dout, T* dx) {
  const int E = s.experts, K = s.top_k;
  const int64_t H = s.ffn.hidden;
  if (w.has_shared) ffn_backward(pool, s.ffn, w.shared, g.shared, x, rows, saved.shared, dout, dx, false);
  else std::fill_n(dx, rows * H, T(0));

  std::vector<T> dweight(size_t(rows * K), T(0));
  for (int e = 0; e < E; ++e) {
    const auto& ex = saved.expert[size_t(e)];
    const int64_t m = int64_t(ex.rows.size());
    if (m == 0) continue;
    std::vector<T> dy(size_t(m * H)), dxe(size_t(m * H));
    for (int64_t i = 0; i < m; ++i) {
      const T* d = dout + int64_t(ex.rows[size_t(i)]) * H;
      const T* eo = ex.out.data() + i * H;
      const T wt = saved.weight[size_t(ex.slots[size_t(i)])];
      T acc = 0;
      for (int64_t c = 0; c < H; ++c) {
        dy[size_t(i * H + c)] = wt * d[c];
        acc += d[c] * eo[c];
      }
      dweight[size_t(ex.slots[size_t(i)])] = acc;
    }
    ffn_backward(pool, s.ffn, w.experts[size_t(e)], g.experts[size_t(e)], ex.x.data(), m, ex.ffn, dy.data(),
                 dxe.data(), false);
    for (int64_t i = 0; i < m; ++i) {
      T* d = dx + int64_t(ex.rows[size_t(i)]) * H;
      for (int64_t c = 0; c < H; ++c) d[c] += dxe[size_t(i * H + c)];
    }
  }

  // w_i = c·s_i / S over the chosen experts: ds_i = c/S · (dw_i − Σ_j dw_j·s_j / S); ds/dlogit = s(1 − s).
  std::vector<T> dlogits(size_t(rows * E), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T* sc = saved.score.data() + r * E;
    const int32_t* ids = saved.chosen.data() + r * K;
    double sum = 0.0, weighted = 0.0;
    for (int i = 0; i < K; ++i) sum += double(sc[ids[i]]);
    for (int i = 0; i < K; ++i) weighted += double(dweight[size_t(r * K + i)]) * double(sc[ids[i]]);
    for (int i = 0; i < K; ++i) {
      const double si = double(sc[ids[i]]);
      const double ds = s.routed_scaling / sum * (double(dweight[size_t(r * K + i)]) - weighted / sum);
      dlogits[size_t(r * E + ids[i])] += T(ds * si * (1.0 - si));
    }
  }
  if (s.balance_coef > 0) {
    // d/ds_i of Σ_e g_e·s_e/S (g_e = coef·f_e / (seq · sequences), f fixed) = (g_i − Σ_e g_e·s_e/S) / S.
    const int64_t seq = s.seq > 0 ? s.seq : rows;
    const double sequences = double(rows / seq);
    for (int64_t r0 = 0; r0 < rows; r0 += seq) {
      std::vector<double> gcoef(static_cast<size_t>(E), 0.0);
      for (int64_t r = r0; r < r0 + seq; ++r)
        for (int i = 0; i < K; ++i)
          gcoef[size_t(saved.chosen[size_t(r * K + i)])] +=
              s.balance_coef * double(E) / (double(K) * double(seq)) / (double(seq) * sequences);
      for (int64_t r = r0; r < r0 + seq; ++r) {
        const T* sc = saved.score.data() + r * E;
        double sum = 0.0, weighted = 0.0;
        for (int e = 0; e < E; ++e) sum += double(sc[e]);
        for (int e = 0; e < E; ++e) weighted += gcoef[size_t(e)] * double(sc[e]);
        for (int e = 0; e < E; ++e) {
          const double si = double(sc[e]);
          const double ds = (gcoef[size_t(e)] - weighted / sum) / sum;
          dlogits[size_t(r * E + e)] += T(ds * si * (1.0 - si));
        }
      }
    }
  }
  linear_backward(pool, x, w.router, dlogits.data(), rows, H, E, dx, g.router, true);
}

#define M3_MOE_TRAIN(T)                                                                                              \
  template void ffn_forward<T>(ThreadPool&, const FfnShape&, const FfnParams<T>&, const T*, int64_t, FfnSaved<T>&, T*); \
  template void ffn_backward<T>(ThreadPool&, const FfnShape&, const FfnParams<T>&, const FfnGrads<T>&, const T*,       \
                                int64_t, const FfnSaved<T>&, const T*, T*, bool);                                    \
  template void moe_forward<T>(ThreadPool&, const MoeShape&, const MoeParams<T>&, const T*, int64_t, const int32_t*,   \
                               MoeSaved<T>&, T*);                                                                    \
  template void moe_backward<T>(ThreadPool&, const MoeShape&, const MoeParams<T>&, const MoeGrads<T>&, const T*,       \
                                int64_t, const MoeSaved<T>&, const T*, T*);
M3_MOE_TRAIN(float)
M3_MOE_TRAIN(double)
#undef M3_MOE_TRAIN

}  // namespace m3::train
