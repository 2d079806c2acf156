#include "attention/msa_attention.h"

#include <algorithm>
#include <cmath>

#include "attention/attention_kernels.h"
#include "attention/msa_select.h"

namespace m3 {

void msa_select_run(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run, BlockSelection& sel) {
  const int G = run.kv_heads, id = run.index_dim, K = run.topk;
  const int B = cache.shape().block_size;
  const int64_t R = run.rows;
  const int64_t last_local = (run.first_pos + R - 1) / B;
  const float scale = float(1.0 / std::sqrt(double(id)));
  sel.topk = K;
  sel.blocks.assign(size_t(R * G * K), -1);
  sel.count.assign(size_t(R * G), 0);

  // Rows whose visible blocks fit in top-k attend densely and need no scores. The first row that
  // needs scores for block b is the first with local block > b and local block >= topk.
  auto first_row_beyond = [&](int64_t block) {  // first row whose local block exceeds `block`
    const int64_t pos = (block + 1) * B;
    return std::clamp<int64_t>(pos - run.first_pos, 0, R);
  };
  const int64_t first_sparse_row = first_row_beyond(K - 1);
  const int64_t n_blocks = last_local;  // blocks that can be non-local for some row
  std::vector<float> scores;            // (rows needing scores)·G × n_blocks
  const int64_t sparse_rows = R - first_sparse_row;
  if (sparse_rows > 0 && n_blocks > 0) {
    scores.assign(size_t(sparse_rows * G * n_blocks), -INFINITY);
    pool.parallel_for(n_blocks, [&](int64_t b0, int64_t b1) {
      std::vector<float> col(size_t(sparse_rows * G));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = std::max(first_sparse_row, first_row_beyond(b));
        if (r0 >= R) continue;
        const int64_t nq = (R - r0) * G;
        qk_block_max(run.iq + r0 * G * id, int(nq), id, cache.index_k_block_t(layer, b), B, B, col.data());
        for (int64_t i = 0; i < nq; ++i)
          scores[size_t(((r0 - first_sparse_row) * G + i) * n_blocks + b)] = col[size_t(i)] * scale;
      }
    }, 1);
  }

  pool.parallel_for(R * G, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> picked;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / G;
      const int64_t local = (run.first_pos + r) / B;
      if (r < first_sparse_row) {
        for (int32_t b = 0; b <= local; ++b) picked.push_back(b);
      } else {
        msa_select_blocks(scores.data() + ((r - first_sparse_row) * G + t % G) * n_blocks, local, K, picked);
      }
      std::copy(picked.begin(), picked.end(), sel.blocks.begin() + t * K);
      sel.count[size_t(t)] = int32_t(picked.size());
      picked.clear();
    }
  }, 8);
}

void attention_run(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run,
                   const BlockSelection* sel, float* out) {
  const int G = run.kv_heads, hd = run.head_dim, Hg = run.q_heads / run.kv_heads;
  const int B = cache.shape().block_size;
  const float scale = float(1.0 / std::sqrt(double(hd)));

  // One task per (row, group): the group's query heads share its blocks, so each K/V block is
  // loaded once for all of them.
  pool.parallel_for(run.rows * G, [&](int64_t t0, int64_t t1) {
    std::vector<float> q(size_t(Hg * hd)), S(size_t(Hg * B)), m(static_cast<size_t>(Hg)), l(static_cast<size_t>(Hg));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / G;
      const int g = int(t % G);
      const int64_t pos = run.first_pos + r;
      const float* qg = run.q + (r * run.q_heads + int64_t(g) * Hg) * hd;
      for (int i = 0; i < Hg * hd; ++i) q[size_t(i)] = qg[i] * scale;
      float* o = out + (r * run.q_heads + int64_t(g) * Hg) * hd;
      std::fill(o, o + Hg * hd, 0.0f);
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      const int32_t n = sel ? sel->count[size_t(t)] : int32_t(pos / B + 1);
      for (int32_t j = 0; j < n; ++j) {
        const int64_t b = sel ? sel->blocks[size_t(t * sel->topk + j)] : j;
        const int n_keys = int(std::min<int64_t>(B, pos + 1 - b * B));  // causal inside the local block
        qk_scores(q.data(), Hg, hd, cache.k_block_t(layer, b, g), B, n_keys, S.data(), B);
        softmax_block_update(S.data(), Hg, B, n_keys, m.data(), l.data(), o, hd);
        pv_accumulate(S.data(), Hg, B, n_keys, cache.v_block(layer, b, g), hd, o);
      }
      for (int h = 0; h < Hg; ++h)
        for (int d = 0; d < hd; ++d) o[h * hd + d] /= l[size_t(h)];
    }
  });
}

}  // namespace m3
