#include <cmath>
#include <vector>

#include "attention/block_attention.h"
#include "attention/msa_select.h"
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

void attention_forward(const ForwardContext& ctx, int layer, const AttentionWeights& w, KvCache& cache,
                       const float* h, float* out) {
  const TextConfig& cfg = ctx.cfg;
  const int Hq = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, hd = cfg.head_dim;
  const int heads_per_group = Hq / Hkv;
  const int B = cache.shape().block_size;
  const int64_t R = ctx.rows;

  // q (R, Hq·hd), k/v (R, Hkv·hd)
  std::vector<float> q(static_cast<size_t>(R * Hq * hd)), k(static_cast<size_t>(R * Hkv * hd)), v(static_cast<size_t>(R * Hkv * hd));
  matmul(ctx.pool, h, R, w.q, q.data());
  matmul(ctx.pool, h, R, w.k, k.data());
  matmul(ctx.pool, h, R, w.v, v.data());
  norm_and_rope(ctx, q.data(), Hq, hd, w.q_norm_scale);
  norm_and_rope(ctx, k.data(), Hkv, hd, w.k_norm_scale);
  for (int64_t i = 0; i < R; ++i)
    for (int g = 0; g < Hkv; ++g) {
      std::copy_n(k.data() + (i * Hkv + g) * hd, hd, cache.k(layer, ctx.first_pos + i, g));
      std::copy_n(v.data() + (i * Hkv + g) * hd, hd, cache.v(layer, ctx.first_pos + i, g));
    }

  // Index branch (MSA layers): iq (R, G·id) with G = Hkv index heads, ik (R, id) into the index-K cache.
  const int id = cfg.sparse.sparse_index_dim, topk = cfg.sparse.sparse_topk_blocks;
  std::vector<float> iq;
  if (w.sparse) {
    iq.resize(static_cast<size_t>(R * Hkv * id));
    std::vector<float> ik(static_cast<size_t>(R * id));
    matmul(ctx.pool, h, R, w.index_q, iq.data());
    matmul(ctx.pool, h, R, w.index_k, ik.data());
    norm_and_rope(ctx, iq.data(), Hkv, id, w.index_q_norm_scale);
    norm_and_rope(ctx, ik.data(), 1, id, w.index_k_norm_scale);
    for (int64_t i = 0; i < R; ++i) std::copy_n(ik.data() + i * id, id, cache.index_k(layer, ctx.first_pos + i));
  }

  // One task per (row, KV group): select the group's blocks once, then run its query heads over them.
  std::vector<float> attn(static_cast<size_t>(R * Hq * hd));
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const float index_scale = float(1.0 / std::sqrt(double(id)));
  ctx.pool.parallel_for(R * Hkv, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> blocks;
    std::vector<float> block_scores, scores(static_cast<size_t>(B));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / Hkv;
      const int g = int(t % Hkv);
      const int64_t pos = ctx.first_pos + i;
      const int64_t local = pos / B;
      if (w.sparse && local + 1 > topk) {
        block_scores.resize(static_cast<size_t>(local));
        msa_block_scores(iq.data() + (i * Hkv + g) * id, id, B, local, index_scale,
                         [&](int64_t b) { return cache.index_k_block(layer, b); }, block_scores.data());
        msa_select_blocks(block_scores.data(), local, topk, blocks);
      } else {
        blocks.clear();
        for (int32_t b = 0; b <= local; ++b) blocks.push_back(b);
      }
      for (int hh = 0; hh < heads_per_group; ++hh) {
        const int head = g * heads_per_group + hh;
        attend_blocks(q.data() + (i * Hq + head) * hd, hd, B, pos, blocks, scale,
                      [&](int32_t b) { return cache.k_block(layer, b, g); },
                      [&](int32_t b) { return cache.v_block(layer, b, g); }, scores.data(),
                      attn.data() + (i * Hq + head) * hd);
      }
    }
  });
  matmul(ctx.pool, attn.data(), R, w.o, out);
}

}  // namespace m3
