#pragma once
// Finite-difference gradient checks in float64 for the training ops and model (src/train/): the
// scalar objective is a random projection of an op's output (L = Σ r·y), so one backward with dy = r
// gives dL/d(every input), and central differences give the same derivatives independently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace m3::test {

inline std::vector<double> random_values(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// max |analytic − fd| / max |fd| over the elements of `v`, with fd the central difference of f()
// in each element (v is restored).
inline double fd_relative_error(std::vector<double>& v, const std::vector<double>& analytic,
                                const std::function<double()>& f, double h = 1e-6) {
  EXPECT_EQ(v.size(), analytic.size());
  double worst = 0.0, scale = 1e-12;
  std::vector<double> fd(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = f();
    v[i] = keep - h;
    const double down = f();
    v[i] = keep;
    fd[i] = (up - down) / (2 * h);
    scale = std::max(scale, std::fabs(fd[i]));
  }
  for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::fabs(analytic[i] - fd[i]));
  return worst / scale;
}

}  // namespace m3::test
