#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

namespace m3::train {

ParamGroup param_group(TensorRole role) {
  switch (role) {
    case TensorRole::IndexQProj:
    case TensorRole::IndexKProj:
    case TensorRole::IndexQNorm:
    case TensorRole::IndexKNorm: return ParamGroup::Indexer;
    case TensorRole::RoutingBias: return ParamGroup::Frozen;
    default: return ParamGroup::Backbone;
  }
}

bool param_decays(const TensorSpec& spec) {
  // Matrices decay; norm scales, biases and the embedding rows' norms do not. The embedding and
  // lm_head are matrices and decay, as in GPT-2/llm.c practice.
  return spec.storage != TensorStorage::Vector;
}

AdamW::AdamW(const ParameterTable& table, const AdamWOptions& options)
    : table_(table), o_(options), m_(size_t(table.total()), 0.0f), v_(size_t(table.total()), 0.0f) {}

namespace {

constexpr int64_t kBlock = 1 << 14;  // elements per block of the parallel loops

// Σ x² of a tensor in double: fixed blocks, their sums added in order (any thread count, same bits).
double sum_of_squares(ThreadPool& pool, const float* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> part(static_cast<size_t>(blocks), 0.0);
  pool.parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s = 0.0;
      for (int64_t j = b * kBlock; j < std::min(n, (b + 1) * kBlock); ++j) s += double(x[j]) * double(x[j]);
      part[size_t(b)] = s;
    }
  });
  double s = 0.0;
  for (double p : part) s += p;
  return s;
}

}  // namespace

ClipReport AdamW::step(ThreadPool& pool, std::vector<float>& params, std::vector<float>& grads, double lr) {
  const auto& specs = table_.specs();
  // Group norms in double, in table order (deterministic).
  double sq[2] = {0.0, 0.0};
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamGroup g = param_group(specs[i].role);
    if (g == ParamGroup::Frozen) continue;
    sq[g == ParamGroup::Indexer] += sum_of_squares(pool, grads.data() + table_.offset(i), specs[i].numel());
  }
  ClipReport report{std::sqrt(sq[0]), std::sqrt(sq[1])};
  const double limits[2] = {o_.clip, o_.indexer_clip};
  const double norms[2] = {report.backbone_norm, report.indexer_norm};
  float factor[2];
  for (int g = 0; g < 2; ++g)
    factor[g] = limits[g] > 0.0 && norms[g] > limits[g] ? float(limits[g] / norms[g]) : 1.0f;

  ++t_;
  const double bc1 = 1.0 - std::pow(o_.beta1, double(t_)), bc2 = 1.0 - std::pow(o_.beta2, double(t_));
  const float beta1 = float(o_.beta1), b2 = float(o_.beta2);
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamGroup g = param_group(specs[i].role);
    if (g == ParamGroup::Frozen) continue;
    const int gi = g == ParamGroup::Indexer;
    const float group_lr = float(lr * (gi ? o_.indexer_lr_scale : 1.0));
    const float step_size = float(double(group_lr) / bc1);
    const float inv_bc2 = float(1.0 / bc2);
    const float decay = param_decays(specs[i]) ? float(o_.weight_decay) : 0.0f;
    const float clip = factor[gi], eps = float(o_.eps);
    const int64_t off = table_.offset(i), n = specs[i].numel();
    float* p = params.data() + off;
    float* gr = grads.data() + off;
    float* m = m_.data() + off;
    float* v = v_.data() + off;
    pool.parallel_for((n + kBlock - 1) / kBlock, [&](int64_t b0, int64_t b1) {
      for (int64_t j = b0 * kBlock; j < std::min(n, b1 * kBlock); ++j) {  // element-wise: any split, same bits
        gr[j] *= clip;
        m[j] = beta1 * m[j] + (1.0f - beta1) * gr[j];
        v[j] = b2 * v[j] + (1.0f - b2) * gr[j] * gr[j];
        p[j] -= step_size * m[j] / (std::sqrt(v[j] * inv_bc2) + eps) + group_lr * decay * p[j];
      }
    });
  }
  return report;
}

}  // namespace m3::train
