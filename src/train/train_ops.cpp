#include "train/train_ops.h"

#include <algorithm>
#include <cmath>

namespace m3::train {

template <typename T>
void rmsnorm_forward(const T* x, const T* w, int64_t rows, int64_t n, double eps, T* y, T* inv_rms) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    double ss = 0.0;  // in double, as the inference norm (kernels/norm.cpp) sums it
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * double(xr[i]);
    const T inv = T(1.0 / std::sqrt(ss / double(n) + eps));
    inv_rms[r] = inv;
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * (T(1) + w[i]);
  }
}

template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* inv_rms, const T* dy, int64_t rows, int64_t n, T* dx, T* dw) {
  // With x̂ = x·inv and y = x̂·(1 + w):  dw += Σ_rows dy·x̂,  dx = inv·(dx̂ − x̂·mean(dx̂·x̂)), dx̂ = dy·(1 + w).
  // dw first: dx may alias dy.
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    const T* dyr = dy + r * n;
    for (int64_t i = 0; i < n; ++i) dw[i] += dyr[i] * xr[i] * inv_rms[r];
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    const T* dyr = dy + r * n;
    T* dxr = dx + r * n;
    const T inv = inv_rms[r];
    double dot = 0.0;
    for (int64_t i = 0; i < n; ++i) dot += double(dyr[i] * (T(1) + w[i])) * double(xr[i] * inv);
    const T mean = T(dot / double(n));
    for (int64_t i = 0; i < n; ++i) dxr[i] = inv * (dyr[i] * (T(1) + w[i]) - xr[i] * inv * mean);
  }
}

template <typename T>
RopeAngles<T>::RopeAngles(double theta, int rotary_dim_, const int64_t* positions, int64_t count)
    : rotary_dim(rotary_dim_) {
  const int half = rotary_dim / 2;
  cos.resize(size_t(count * half));
  sin.resize(size_t(count * half));
  for (int64_t i = 0; i < count; ++i)
    for (int j = 0; j < half; ++j) {
      const double angle = double(positions[i]) * std::pow(theta, -2.0 * j / double(rotary_dim));
      cos[size_t(i * half + j)] = T(std::cos(angle));
      sin[size_t(i * half + j)] = T(std::sin(angle));
    }
}

template <typename T>
void rope_rotate(const RopeAngles<T>& angles, T* x, int64_t rows, int heads, int dim, bool inverse) {
  const int half = angles.rotary_dim / 2;
  for (int64_t i = 0; i < rows; ++i) {
    const T* c = angles.cos.data() + i * half;
    const T* s = angles.sin.data() + i * half;
    for (int h = 0; h < heads; ++h) {
      T* v = x + (i * heads + h) * dim;
      for (int j = 0; j < half; ++j) {
        const T a = v[j], b = v[j + half];
        const T sn = inverse ? -s[j] : s[j];
        v[j] = a * c[j] - b * sn;
        v[j + half] = b * c[j] + a * sn;
      }
    }
  }
}

namespace {
template <typename T>
T sigmoid_of(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
}  // namespace

template <typename T>
void swigluoai_forward(const T* gate, const T* up, int64_t n, double alpha, double limit, T* out) {
  const T a = T(alpha), L = T(limit);
  for (int64_t i = 0; i < n; ++i) {
    const T g = std::min(gate[i], L);
    const T u = std::min(std::max(up[i], -L), L);
    out[i] = g * sigmoid_of(a * g) * (u + T(1));
  }
}

template <typename T>
void swigluoai_backward(const T* gate, const T* up, const T* dout, int64_t n, double alpha, double limit, T* dgate,
                        T* dup) {
  const T a = T(alpha), L = T(limit);
  for (int64_t i = 0; i < n; ++i) {
    const T g = std::min(gate[i], L);
    const T u = std::min(std::max(up[i], -L), L);
    const T s = sigmoid_of(a * g);
    const T d = dout[i];
    // d/dg [g·σ(αg)] = σ + αg·σ(1 − σ); the clamps are identities inside their range.
    dgate[i] = gate[i] <= L ? d * (u + T(1)) * (s + a * g * s * (T(1) - s)) : T(0);
    dup[i] = (up[i] >= -L && up[i] <= L) ? d * g * s : T(0);
  }
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* dx, int64_t rows, int64_t hidden, T* dtable) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = dtable + int64_t(tokens[r]) * hidden;
    for (int64_t i = 0; i < hidden; ++i) row[i] += dx[r * hidden + i];
  }
}

template <typename T>
double cross_entropy(ThreadPool& pool, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                     T* dlogits) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += targets[r] >= 0;
  const double scale = count > 0 ? 1.0 / double(count) : 0.0;
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* z = logits + r * vocab;
      T* dz = dlogits + r * vocab;
      if (targets[r] < 0) {
        std::fill_n(dz, vocab, T(0));
        continue;
      }
      const T mx = *std::max_element(z, z + vocab);
      const T target_logit = z[targets[r]];
      // One exp per logit, kept in dz (which may alias z: each z[i] is read before dz[i] is written).
      double sum = 0.0;
      for (int64_t i = 0; i < vocab; ++i) {
        dz[i] = std::exp(z[i] - mx);
        sum += double(dz[i]);
      }
      row_loss[size_t(r)] = double(mx) + std::log(sum) - double(target_logit);
      const T f = T(scale / sum);
      for (int64_t i = 0; i < vocab; ++i) dz[i] *= f;
      dz[targets[r]] -= T(scale);
    }
  }, 8);
  double loss = 0.0;
  for (double l : row_loss) loss += l;
  return count > 0 ? loss / double(count) : 0.0;
}

#define M3_TRAIN_OPS(T)                                                                                          \
  template void rmsnorm_forward<T>(const T*, const T*, int64_t, int64_t, double, T*, T*);                          \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);             \
  template struct RopeAngles<T>;                                                                                 \
  template void rope_rotate<T>(const RopeAngles<T>&, T*, int64_t, int, int, bool);                               \
  template void swigluoai_forward<T>(const T*, const T*, int64_t, double, double, T*);                           \
  template void swigluoai_backward<T>(const T*, const T*, const T*, int64_t, double, double, T*, T*);             \
  template void embedding_backward<T>(const int32_t*, const T*, int64_t, int64_t, T*);                           \
  template double cross_entropy<T>(ThreadPool&, const T*, const int32_t*, int64_t, int64_t, T*);
M3_TRAIN_OPS(float)
M3_TRAIN_OPS(double)
#undef M3_TRAIN_OPS

}  // namespace m3::train
