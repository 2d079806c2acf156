#include "train/attention_train.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/vec_ops.h"

namespace m3::train {

namespace {

// Dot products and y += a·x over head dims: float on the kernels' SIMD paths (kernels/vec_ops.h),
// double (the gradient checks) in plain loops.
double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
float dot(const float* a, const float* b, int n) { return vec_ops().dot(a, b, n); }
void axpy(double alpha, const double* x, double* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void axpy(float alpha, const float* x, float* y, int n) { vec_ops().axpy(alpha, x, y, n); }

// The keys query p of group g sees, in the order its blocks are listed (dense: 0..p).
void visible_keys(const BlockChoice* choice, int g, int64_t p, std::vector<int64_t>& keys) {
  keys.clear();
  if (choice == nullptr) {
    keys.resize(size_t(p + 1));
    std::iota(keys.begin(), keys.end(), int64_t(0));
    return;
  }
  const int32_t* blocks = choice->of(g, p);
  for (int j = 0; j < choice->count_of(g, p); ++j) {
    const int64_t first = int64_t(blocks[j]) * choice->block;
    const int64_t last = std::min<int64_t>(first + choice->block - 1, p);
    for (int64_t t = first; t <= last; ++t) keys.push_back(t);
  }
}

}  // namespace

template <typename T>
BlockChoice msa_select(ThreadPool& pool, const AttentionShape& s, const T* iq, const T* ik) {
  const int64_t N = s.tokens;
  const int G = s.kv_heads, Di = s.index_dim, B = s.block, K = s.topk;
  BlockChoice c;
  c.tokens = N;
  c.groups = G;
  c.topk = K;
  c.block = B;
  c.blocks.assign(size_t(G * N * K), -1);
  c.count.assign(size_t(G * N), 0);
  const T scale = T(1.0 / std::sqrt(double(Di)));
  pool.parallel_for(G * N, [&](int64_t i0, int64_t i1) {
    std::vector<T> block_max;
    std::vector<int32_t> order;
    for (int64_t i = i0; i < i1; ++i) {
      const int g = int(i / N);
      const int64_t p = i % N;
      const int64_t local = p / B;
      int32_t* out = c.blocks.data() + i * K;
      if (local + 1 <= K) {  // every visible block fits the budget: dense
        for (int64_t b = 0; b <= local; ++b) out[b] = int32_t(b);
        c.count[size_t(i)] = int32_t(local + 1);
        continue;
      }
      // Candidates are the blocks before the local one; all their keys are visible.
      block_max.assign(static_cast<size_t>(local), -std::numeric_limits<T>::infinity());
      const T* q = iq + (p * G + g) * Di;
      for (int64_t t = 0; t < local * B; ++t) {
        const T z = dot(q, ik + t * Di, Di) * scale;
        T& m = block_max[size_t(t / B)];
        m = std::max(m, z);
      }
      order.resize(static_cast<size_t>(local));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + (K - 1), order.end(), [&](int32_t a, int32_t b) {
        return block_max[size_t(a)] > block_max[size_t(b)] || (block_max[size_t(a)] == block_max[size_t(b)] && a < b);
      });
      std::copy_n(order.begin(), K - 1, out);
      out[K - 1] = int32_t(local);
      c.count[size_t(i)] = K;
    }
  });
  return c;
}

template <typename T>
void attention_forward(ThreadPool& pool, const AttentionShape& s, const T* q, const T* k, const T* v,
                       const BlockChoice* choice, T* o, T* lse) {
  const int64_t N = s.tokens;
  const int Hq = s.q_heads, Hkv = s.kv_heads, D = s.head_dim, per_group = Hq / Hkv;
  const T scale = T(1.0 / std::sqrt(double(D)));
  pool.parallel_for(N * Hq, [&](int64_t i0, int64_t i1) {
    std::vector<int64_t> keys;
    std::vector<T> score;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t p = i / Hq;
      const int h = int(i % Hq), g = h / per_group;
      visible_keys(choice, g, p, keys);
      const T* qp = q + (p * Hq + h) * D;
      score.resize(keys.size());
      T mx = -std::numeric_limits<T>::infinity();
      for (size_t j = 0; j < keys.size(); ++j) {
        score[j] = dot(qp, k + (keys[j] * Hkv + g) * D, D) * scale;
        mx = std::max(mx, score[j]);
      }
      double sum = 0.0;
      for (size_t j = 0; j < keys.size(); ++j) {
        score[j] = std::exp(score[j] - mx);
        sum += double(score[j]);
      }
      lse[i] = T(double(mx) + std::log(sum));
      if (o == nullptr) continue;
      T* op = o + (p * Hq + h) * D;
      std::fill_n(op, D, T(0));
      const T inv = T(1.0 / sum);
      for (size_t j = 0; j < keys.size(); ++j) {
        axpy(score[j] * inv, v + (keys[j] * Hkv + g) * D, op, D);
      }
    }
  });
}

template <typename T>
void attention_backward(ThreadPool& pool, const AttentionShape& s, const T* q, const T* k, const T* v,
                        const BlockChoice* choice, const T* o, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  const int64_t N = s.tokens;
  const int Hq = s.q_heads, Hkv = s.kv_heads, D = s.head_dim, per_group = Hq / Hkv;
  const T scale = T(1.0 / std::sqrt(double(D)));
  // Each query head accumulates its own share of dk/dv; the shares are added in head order
  // afterwards, so the result does not depend on how heads are spread over threads.
  std::vector<T> dk_head(size_t(Hq * N * D), T(0)), dv_head(size_t(Hq * N * D), T(0));
  pool.parallel_for(Hq, [&](int64_t h0, int64_t h1) {
    std::vector<int64_t> keys;
    for (int64_t hh = h0; hh < h1; ++hh) {
      const int h = int(hh), g = h / per_group;
      T* dkh = dk_head.data() + h * N * D;
      T* dvh = dv_head.data() + h * N * D;
      for (int64_t p = 0; p < N; ++p) {
        visible_keys(choice, g, p, keys);
        const int64_t row = p * Hq + h;
        const T* qp = q + row * D;
        const T* dop = dout + row * D;
        T* dqp = dq + row * D;
        std::fill_n(dqp, D, T(0));
        const T delta = dot(dop, o + row * D, D);  // Σ_t P·(do·v_t)
        for (int64_t t : keys) {
          const T* kt = k + (t * Hkv + g) * D;
          const T* vt = v + (t * Hkv + g) * D;
          const T prob = std::exp(dot(qp, kt, D) * scale - lse[row]);
          const T ds = prob * (dot(dop, vt, D) - delta) * scale;
          axpy(ds, kt, dqp, D);
          axpy(ds, qp, dkh + t * D, D);
          axpy(prob, dop, dvh + t * D, D);
        }
      }
    }
  });
  for (int64_t t = 0; t < N; ++t)
    for (int g = 0; g < Hkv; ++g) {
      T* dkt = dk + (t * Hkv + g) * D;
      T* dvt = dv + (t * Hkv + g) * D;
      std::fill_n(dkt, D, T(0));
      std::fill_n(dvt, D, T(0));
      for (int h = g * per_group; h < (g + 1) * per_group; ++h)
        for (int d = 0; d < D; ++d) {
          dkt[d] += dk_head[size_t((h * N + t) * D + d)];
          dvt[d] += dv_head[size_t((h * N + t) * D + d)];
        }
    }
}

template <typename T>
IndexerKl indexer_kl(ThreadPool& pool, const AttentionShape& s, const T* q, const T* k, const T* lse, const T* iq,
                     const T* ik, const BlockChoice* choice, double coef, T* diq, T* dik) {
  const int64_t N = s.tokens;
  const int Hq = s.q_heads, G = s.kv_heads, D = s.head_dim, Di = s.index_dim, per_group = Hq / G;
  const T scale = T(1.0 / std::sqrt(double(D))), index_scale = T(1.0 / std::sqrt(double(Di)));
  std::vector<T> dik_group(size_t(G * N * Di), T(0));
  std::vector<double> kl_group(static_cast<size_t>(G), 0.0);
  pool.parallel_for(G, [&](int64_t g0, int64_t g1) {
    std::vector<int64_t> keys;
    std::vector<T> teacher, z;
    for (int64_t gg = g0; gg < g1; ++gg) {
      const int g = int(gg);
      T* dikg = dik_group.data() + g * N * Di;
      for (int64_t p = 0; p < N; ++p) {
        visible_keys(choice, g, p, keys);
        const size_t n = keys.size();
        teacher.assign(n, T(0));
        for (int h = g * per_group; h < (g + 1) * per_group; ++h) {
          const T* qp = q + (p * Hq + h) * D;
          const T l = lse[p * Hq + h];
          for (size_t j = 0; j < n; ++j) teacher[j] += std::exp(dot(qp, k + (keys[j] * G + g) * D, D) * scale - l);
        }
        for (T& x : teacher) x /= T(per_group);
        const T* iqp = iq + (p * G + g) * Di;
        z.resize(n);
        T mx = -std::numeric_limits<T>::infinity();
        for (size_t j = 0; j < n; ++j) {
          z[j] = dot(iqp, ik + keys[j] * Di, Di) * index_scale;
          mx = std::max(mx, z[j]);
        }
        double sum = 0.0;
        for (size_t j = 0; j < n; ++j) sum += std::exp(double(z[j] - mx));
        const double log_norm = double(mx) + std::log(sum);
        T* diqp = diq + (p * G + g) * Di;
        std::fill_n(diqp, Di, T(0));
        double kl = 0.0;
        for (size_t j = 0; j < n; ++j) {
          const double log_q = double(z[j]) - log_norm;
          if (teacher[j] > T(0)) kl += double(teacher[j]) * (std::log(double(teacher[j])) - log_q);
          // d KL / d z_j = Q_j − P̄_j (the teacher sums to 1 over the support)
          const T dz = T(coef * (std::exp(log_q) - double(teacher[j]))) * index_scale;
          axpy(dz, ik + keys[j] * Di, diqp, Di);
          axpy(dz, iqp, dikg + keys[j] * Di, Di);
        }
        kl_group[size_t(g)] += kl;
      }
    }
  });
  IndexerKl out;
  for (int64_t t = 0; t < N; ++t) {
    T* dikt = dik + t * Di;
    std::fill_n(dikt, Di, T(0));
    for (int g = 0; g < G; ++g)
      for (int d = 0; d < Di; ++d) dikt[d] += dik_group[size_t((g * N + t) * Di + d)];
  }
  for (double kl : kl_group) out.kl_sum += kl;
  return out;
}

#define M3_ATTENTION_TRAIN(T)                                                                                      \
  template BlockChoice msa_select<T>(ThreadPool&, const AttentionShape&, const T*, const T*);                      \
  template void attention_forward<T>(ThreadPool&, const AttentionShape&, const T*, const T*, const T*,              \
                                     const BlockChoice*, T*, T*);                                                  \
  template void attention_backward<T>(ThreadPool&, const AttentionShape&, const T*, const T*, const T*,             \
                                      const BlockChoice*, const T*, const T*, const T*, T*, T*, T*);                \
  template IndexerKl indexer_kl<T>(ThreadPool&, const AttentionShape&, const T*, const T*, const T*, const T*,     \
                                   const T*, const BlockChoice*, double, T*, T*);
M3_ATTENTION_TRAIN(float)
M3_ATTENTION_TRAIN(double)
#undef M3_ATTENTION_TRAIN

}  // namespace m3::train
