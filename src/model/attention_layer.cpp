#include <cmath>
#include <vector>

#include "attention/msa_attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "model/layers.h"

namespace m3 {

namespace {

// Per-head Gemma norm then partial RoPE, in place. x (rows, heads·dim)
void norm_and_rope(const ForwardContext& ctx, float* x, int heads, int dim, const std::vector<float>& norm_scale) {
  gemma_rmsnorm(x, norm_scale.data(), ctx.rows * heads, dim, ctx.cfg.rms_norm_eps, x);
  for (int64_t i = 0; i < ctx.rows; ++i) ctx.rope.apply(x + i * heads * dim, i, heads, dim);
}

}  // namespace

void attention_forward(const ForwardContext& ctx, int layer, const AttentionWeights& w, const float* h, float* out) {
  const TextConfig& cfg = ctx.cfg;
  const int Hq = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, hd = cfg.head_dim;
  const int id = cfg.sparse.sparse_index_dim;
  const int64_t R = ctx.rows;

  using B = Workspace::Buffer;
  // q (R, Hq·hd), k/v (R, Hkv·hd), over the rows of every sequence.
  float* q = ctx.ws.get<float>(B::Q, size_t(R * Hq * hd));
  float* k = ctx.ws.get<float>(B::K, size_t(R * Hkv * hd));
  float* v = ctx.ws.get<float>(B::V, size_t(R * Hkv * hd));
  // Index branch (MSA layers): iq (R, G·id) with G = Hkv index heads, ik (R, id).
  float* iq = w.sparse ? ctx.ws.get<float>(B::IndexQ, size_t(R * Hkv * id)) : nullptr;
  float* ik = w.sparse ? ctx.ws.get<float>(B::IndexK, size_t(R * id)) : nullptr;
  // The five projections of h in one call: h is packed once for all of them.
  const MatmulTarget projections[] = {{&w.q, q}, {&w.k, k}, {&w.v, v}, {&w.index_q, iq}, {&w.index_k, ik}};
  matmul_many(ctx.pool, h, nullptr, R, std::span<const MatmulTarget>(projections, w.sparse ? 5 : 3));
  norm_and_rope(ctx, q, Hq, hd, w.q_norm_scale);
  norm_and_rope(ctx, k, Hkv, hd, w.k_norm_scale);
  if (w.sparse) {
    norm_and_rope(ctx, iq, Hkv, id, w.index_q_norm_scale);
    norm_and_rope(ctx, ik, 1, id, w.index_k_norm_scale);
  }

  float* attn = ctx.ws.get<float>(B::AttnOut, size_t(R * Hq * hd));
  for (const SequenceRun& s : ctx.runs) {
    KvCache& cache = *s.cache;
    for (int64_t i = s.row0; i < s.row0 + s.rows; ++i) {
      const int64_t pos = s.first_pos + (i - s.row0);
      for (int g = 0; g < Hkv; ++g)
        cache.write_kv(layer, pos, g, k + (i * Hkv + g) * hd, v + (i * Hkv + g) * hd);
      if (w.sparse) cache.write_index_k(layer, pos, ik + i * id);
    }

    AttentionRun run;
    run.q = q + s.row0 * Hq * hd;
    run.first_pos = s.first_pos;
    run.rows = s.rows;
    run.q_heads = Hq;
    run.kv_heads = Hkv;
    run.head_dim = hd;
    run.index_dim = id;
    run.topk = cfg.sparse.sparse_topk_blocks;
    BlockSelection sel;
    if (w.sparse) {
      run.iq = iq + s.row0 * Hkv * id;
      msa_select_run(ctx.pool, cache, layer, run, sel, &ctx.ws);
    }
    attention_run(ctx.pool, cache, layer, run, w.sparse ? &sel : nullptr, attn + s.row0 * Hq * hd);
  }
  matmul(ctx.pool, attn, R, w.o, out);
}

}  // namespace m3
