#include <algorithm>
#include <numeric>

#include "kernels/activations.h"
#include "kernels/matmul.h"
#include "model/layers.h"

namespace m3 {

void moe_route(const float* router_logits, const std::vector<float>& bias, int experts, int top_k,
               double routed_scaling_factor, int32_t* ids, float* weights) {
  std::vector<float> score(static_cast<size_t>(experts)), choice(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e) {
    score[size_t(e)] = sigmoid(router_logits[e]);
    choice[size_t(e)] = score[size_t(e)] + bias[size_t(e)];  // the bias steers selection only
  }
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
    return choice[size_t(a)] > choice[size_t(b)] || (choice[size_t(a)] == choice[size_t(b)] && a < b);
  });
  double sum = 0.0;
  for (int i = 0; i < top_k; ++i) sum += score[size_t(order[size_t(i)])];
  for (int i = 0; i < top_k; ++i) {
    ids[i] = order[size_t(i)];
    weights[i] = float(double(score[size_t(order[size_t(i)])]) / sum * routed_scaling_factor);
  }
}

namespace {

// gate/up on the gathered rows, SwiGLU-OAI, down. x rows picked by `rows` (m of them) -> out (m, hidden)
void expert_forward(const ForwardContext& ctx, const MlpWeights& w, const float* x, const int32_t* rows, int64_t m,
                    float* out) {
  const int64_t width = w.gate.rows;
  std::vector<float> gate(static_cast<size_t>(m * width)), up(static_cast<size_t>(m * width));
  matmul_gather(ctx.pool, x, rows, m, w.gate, gate.data());
  matmul_gather(ctx.pool, x, rows, m, w.up, up.data());
  swigluoai(gate.data(), up.data(), m * width, float(ctx.cfg.swiglu_alpha), float(ctx.cfg.swiglu_limit), gate.data());
  matmul(ctx.pool, gate.data(), m, w.down, out);
}

}  // namespace

void mlp_forward(const ForwardContext& ctx, const MlpWeights& w, const float* x, float* out) {
  std::vector<int32_t> rows(static_cast<size_t>(ctx.rows));
  std::iota(rows.begin(), rows.end(), 0);
  expert_forward(ctx, w, x, rows.data(), ctx.rows, out);
}

void moe_forward(const ForwardContext& ctx, const MoeWeights& w, const float* x, float* out) {
  const int E = ctx.cfg.num_local_experts, K = ctx.cfg.num_experts_per_tok;
  const int64_t H = ctx.cfg.hidden_size, R = ctx.rows;

  // Router in fp32 against the fp32 gate weight.
  std::vector<float> logits(static_cast<size_t>(R * E));
  matmul(ctx.pool, x, R, w.router, logits.data());
  std::vector<int32_t> ids(static_cast<size_t>(R * K));
  std::vector<float> weights(static_cast<size_t>(R * K));
  for (int64_t r = 0; r < R; ++r)
    moe_route(logits.data() + r * E, w.routing_bias, E, K, ctx.cfg.routed_scaling_factor, ids.data() + r * K,
              weights.data() + r * K);

  // Shared expert first (weight 1), then each routed expert over the rows that chose it, so every
  // expert's weights are read once per run of tokens.
  if (w.has_shared) {
    mlp_forward(ctx, w.shared, x, out);
  } else {
    std::fill(out, out + R * H, 0.0f);
  }
  std::vector<int32_t> rows;
  std::vector<float> row_weight, expert_out;
  for (int e = 0; e < E; ++e) {
    rows.clear();
    row_weight.clear();
    for (int64_t r = 0; r < R; ++r)
      for (int i = 0; i < K; ++i)
        if (ids[size_t(r * K + i)] == e) {
          rows.push_back(int32_t(r));
          row_weight.push_back(weights[size_t(r * K + i)]);
        }
    if (rows.empty()) continue;
    expert_out.resize(rows.size() * size_t(H));
    expert_forward(ctx, w.experts[size_t(e)], x, rows.data(), int64_t(rows.size()), expert_out.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      float* o = out + int64_t(rows[i]) * H;
      const float* eo = expert_out.data() + i * size_t(H);
      for (int64_t d = 0; d < H; ++d) o[d] += row_weight[i] * eo[d];
    }
  }
}

}  // namespace m3
