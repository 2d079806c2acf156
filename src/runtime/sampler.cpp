#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "m3/error.h"

namespace m3 {

void SamplingParams::validate() const {
  M3_CHECK(std::isfinite(temperature) && temperature >= 0.0f, "temperature must be >= 0, got ", temperature);
  M3_CHECK(top_k >= 0, "top_k must be >= 0, got ", top_k);
  M3_CHECK(top_p > 0.0f && top_p <= 1.0f, "top_p must be in (0, 1], got ", top_p);
  M3_CHECK(min_p >= 0.0f && min_p <= 1.0f, "min_p must be in [0, 1], got ", min_p);
  M3_CHECK(repetition_penalty > 0.0f, "repetition_penalty must be > 0, got ", repetition_penalty);
  M3_CHECK(repetition_window >= 0, "repetition_window must be >= 0");
  M3_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f, "presence_penalty must be in [-2, 2], got ",
           presence_penalty);
  M3_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f, "frequency_penalty must be in [-2, 2], got ",
           frequency_penalty);
  for (const auto& [id, bias] : logit_bias) {
    M3_CHECK(id >= 0, "logit_bias: token id must be >= 0, got ", id);
    M3_CHECK(std::isfinite(bias) && bias >= -100.0f && bias <= 100.0f, "logit_bias: bias must be in [-100, 100], got ",
             bias);
  }
}

Sampler::Sampler(SamplingParams p) : p_(p), rng_(p.seed) { p_.validate(); }

int32_t argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t Sampler::sample(const float* logits, int vocab, const std::vector<int32_t>& history, size_t output_start) {
  work_.assign(logits, logits + vocab);
  if (p_.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen;
    const size_t start = history.size() > size_t(p_.repetition_window) ? history.size() - p_.repetition_window : 0;
    for (size_t i = start; i < history.size(); ++i)
      if (history[i] >= 0 && history[i] < vocab && seen.insert(history[i]).second) {
        float& l = work_[size_t(history[i])];
        l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      }
  }
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> count;
    for (size_t i = std::min(output_start, history.size()); i < history.size(); ++i)
      if (history[i] >= 0 && history[i] < vocab) ++count[history[i]];
    for (const auto& [id, c] : count) work_[size_t(id)] -= p_.frequency_penalty * float(c) + p_.presence_penalty;
  }
  for (const auto& [id, bias] : p_.logit_bias)
    if (id < vocab) work_[size_t(id)] += bias;
  if (p_.temperature == 0.0f) return argmax(work_.data(), vocab);

  // Candidates sorted by logit (descending, ties by id so the draw is reproducible).
  ids_.resize(size_t(vocab));
  std::iota(ids_.begin(), ids_.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return work_[size_t(a)] > work_[size_t(b)] || (work_[size_t(a)] == work_[size_t(b)] && a < b); };
  size_t n = size_t(vocab);
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(ids_.begin(), ids_.begin() + p_.top_k, ids_.end(), before);
    n = size_t(p_.top_k);
  } else {
    std::sort(ids_.begin(), ids_.end(), before);
  }
  std::vector<double> prob(n);
  const double top = work_[size_t(ids_[0])];
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp((double(work_[size_t(ids_[i])]) - top) / p_.temperature);
  for (double& q : prob) q /= sum;
  if (p_.top_p < 1.0f) {
    double acc = 0.0;
    size_t keep = 0;
    while (keep < n && (keep == 0 || acc < p_.top_p)) acc += prob[keep++];
    n = keep;
  }
  if (p_.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && prob[keep] >= p_.min_p * prob[0]) ++keep;
    n = keep;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += prob[i];
  const double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += prob[i];
    if (r < acc) return ids_[i];
  }
  return ids_[n - 1];
}

}  // namespace m3
