#include "model/moe.h"

#include <algorithm>
#include <numeric>

#include "m3/error.h"
#include "kernels/activations.h"
#include "kernels/matmul.h"

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
  float* gate = ctx.ws.get<float>(Workspace::Buffer::ExpertGate, size_t(m * width));
  float* up = ctx.ws.get<float>(Workspace::Buffer::ExpertUp, size_t(m * width));
  const MatmulTarget gate_up[] = {{&w.gate, gate}, {&w.up, up}};  // the gathered rows packed once
  matmul_many(ctx.pool, x, rows, m, gate_up);
  swigluoai(gate, up, m * width, float(ctx.cfg.swiglu_alpha), float(ctx.cfg.swiglu_limit), gate);
  matmul(ctx.pool, gate, m, w.down, out);
}

}  // namespace

void mlp_forward(const ForwardContext& ctx, const MlpWeights& w, const float* x, float* out) {
  std::vector<int32_t> rows(static_cast<size_t>(ctx.rows));
  std::iota(rows.begin(), rows.end(), 0);
  expert_forward(ctx, w, x, rows.data(), ctx.rows, out);
}

MoeRouting moe_route_rows(const ForwardContext& ctx, const MoeWeights& w, const float* x) {
  const int E = ctx.cfg.num_local_experts, K = ctx.cfg.num_experts_per_tok;
  MoeRouting r;
  r.rows = ctx.rows;
  r.top_k = K;
  float* logits = ctx.ws.get<float>(Workspace::Buffer::RouterLogits, size_t(r.rows * E));
  matmul(ctx.pool, x, r.rows, w.router, logits);
  r.expert.resize(size_t(r.rows * K));
  r.weight.resize(size_t(r.rows * K));
  for (int64_t row = 0; row < r.rows; ++row)
    moe_route(logits + row * E, w.routing_bias, E, K, ctx.cfg.routed_scaling_factor,
              r.expert.data() + row * K, r.weight.data() + row * K);
  return r;
}

MoeDispatch moe_dispatch(const MoeRouting& routing, int experts) {
  MoeDispatch d;
  d.offsets.assign(size_t(experts) + 1, 0);
  const int64_t slots = routing.rows * routing.top_k;
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t e = routing.expert[size_t(s)];
    M3_CHECK(e >= 0 && e < experts, "moe_dispatch: expert id ", e, " outside 0..", experts - 1);
    ++d.offsets[size_t(e) + 1];
  }
  for (int e = 0; e < experts; ++e) d.offsets[size_t(e) + 1] += d.offsets[size_t(e)];
  d.rows.resize(size_t(slots));
  d.slots.resize(size_t(slots));
  std::vector<int64_t> next(d.offsets.begin(), d.offsets.end() - 1);
  for (int64_t s = 0; s < slots; ++s) {  // slots in row order, so each expert's entries are too
    const int64_t i = next[size_t(routing.expert[size_t(s)])]++;
    d.rows[size_t(i)] = int32_t(s / routing.top_k);
    d.slots[size_t(i)] = int32_t(s);
  }
  return d;
}

void moe_run_experts(const ForwardContext& ctx, const MoeWeights& w, const float* x, const MoeDispatch& dispatch,
                     const std::vector<int32_t>& experts, float* slot_out) {
  const int64_t H = ctx.cfg.hidden_size;
  for (int32_t e : experts) {
    M3_CHECK(e >= 0 && size_t(e) < w.experts.size(), "moe_run_experts: no expert ", e);
    const int64_t m = dispatch.count(e);
    if (m == 0) continue;
    const int64_t first = dispatch.offsets[size_t(e)];
    float* expert_out = ctx.ws.get<float>(Workspace::Buffer::ExpertOut, size_t(m * H));
    expert_forward(ctx, w.experts[size_t(e)], x, dispatch.rows.data() + first, m, expert_out);
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(expert_out + i * H, H, slot_out + int64_t(dispatch.slots[size_t(first + i)]) * H);
  }
}

void moe_combine(const MoeRouting& routing, const float* shared, const float* slot_out, int64_t hidden, float* out) {
  const int K = routing.top_k;
  std::vector<int> order(static_cast<size_t>(K));
  for (int64_t r = 0; r < routing.rows; ++r) {
    float* o = out + r * hidden;
    if (shared != nullptr) std::copy_n(shared + r * hidden, hidden, o);
    else std::fill_n(o, hidden, 0.0f);
    const int32_t* ids = routing.expert.data() + r * K;
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
    for (int i : order) {
      const float wt = routing.weight[size_t(r * K + i)];
      const float* eo = slot_out + (r * K + i) * hidden;
      for (int64_t d = 0; d < hidden; ++d) o[d] += wt * eo[d];
    }
  }
}

void moe_forward(const ForwardContext& ctx, const MoeWeights& w, const float* x, float* out) {
  const int E = ctx.cfg.num_local_experts;
  const int64_t H = ctx.cfg.hidden_size, R = ctx.rows;
  const MoeRouting routing = moe_route_rows(ctx, w, x);
  const MoeDispatch dispatch = moe_dispatch(routing, E);
  float* shared = nullptr;
  if (w.has_shared) {
    shared = ctx.ws.get<float>(Workspace::Buffer::SharedOut, size_t(R * H));
    mlp_forward(ctx, w.shared, x, shared);
  }
  // All experts, in id order: each one's weights are read once per run of tokens.
  std::vector<int32_t> all(static_cast<size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  float* slot_out = ctx.ws.get<float>(Workspace::Buffer::MoeSlots, size_t(R * routing.top_k * H));
  moe_run_experts(ctx, w, x, dispatch, all, slot_out);
  moe_combine(routing, shared, slot_out, H, out);
}

}  // namespace m3
