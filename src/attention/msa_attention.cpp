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
        // The next index page of this range is requested into L2 during this block's scoring.
        const bool pf = b + 1 < b1;
        const size_t page = size_t(id) * B * dtype_size(cache.dtype());
        if (cache.dtype() == DType::BF16)
          qk_block_max(run.iq + r0 * G * id, int(nq), id, cache.index_k_block_t_bf16(layer, b), B, B, col.data(),
                       pf ? cache.index_k_block_t_bf16(layer, b + 1) : nullptr, pf ? page : 0);
        else
          qk_block_max(run.iq + r0 * G * id, int(nq), id, cache.index_k_block_t(layer, b), B, B, col.data(),
                       pf ? cache.index_k_block_t(layer, b + 1) : nullptr, pf ? page : 0);
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
  const bool bf16 = cache.dtype() == DType::BF16;
  // Rows are processed in tiles per KV group, walking the union of the tile's blocks in ascending
  // order: a K/V block is loaded once for every row and query head of the tile that uses it. Each
  // row still sees its own blocks in ascending order, so its result does not depend on the tile
  // (decode, chunked and one-shot prefill give the same bits).
  constexpr int64_t kTileRows = 8;
  const int64_t tiles = (run.rows + kTileRows - 1) / kTileRows;

  pool.parallel_for(tiles * G, [&](int64_t t0, int64_t t1) {
    const size_t per_row = static_cast<size_t>(Hg) * hd;
    std::vector<float> q(kTileRows * per_row), S(static_cast<size_t>(Hg) * B);
    std::vector<float> m(static_cast<size_t>(kTileRows * Hg)), l(static_cast<size_t>(kTileRows * Hg));
    int32_t next[kTileRows];
    for (int64_t task = t0; task < t1; ++task) {
      const int g = int(task % G);
      const int64_t r0 = (task / G) * kTileRows, nr = std::min(kTileRows, run.rows - r0);
      auto row_count = [&](int64_t i) {
        return sel ? sel->count[size_t((r0 + i) * G + g)] : int32_t((run.first_pos + r0 + i) / B + 1);
      };
      auto row_block = [&](int64_t i, int32_t j) {
        return sel ? sel->blocks[size_t(((r0 + i) * G + g) * sel->topk + j)] : j;
      };
      for (int64_t i = 0; i < nr; ++i) {
        const float* qg = run.q + ((r0 + i) * run.q_heads + int64_t(g) * Hg) * hd;
        for (size_t e = 0; e < per_row; ++e) q[i * per_row + e] = qg[e] * scale;
        float* o = out + ((r0 + i) * run.q_heads + int64_t(g) * Hg) * hd;
        std::fill(o, o + per_row, 0.0f);
        next[i] = 0;
      }
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      for (;;) {
        int64_t b = INT64_MAX;
        for (int64_t i = 0; i < nr; ++i)
          if (next[i] < row_count(i)) b = std::min<int64_t>(b, row_block(i, next[i]));
        if (b == INT64_MAX) break;
        // The block the tile needs after b (each row's next entry beyond b; lists are ascending).
        // Its K and V pages are requested into L2 while b is computed (spread over the qk and pv
        // loops of the first row that uses b), so DRAM traffic overlaps the arithmetic: a page is
        // read once per tile, and in decode nothing else would hide its latency.
        const void* next_k = nullptr;
        const void* next_v = nullptr;
        const size_t page = size_t(hd) * B * dtype_size(cache.dtype());
        {
          int64_t nb = INT64_MAX;
          for (int64_t i = 0; i < nr; ++i) {
            int32_t j = next[i];
            if (j < row_count(i) && row_block(i, j) == b) ++j;
            if (j < row_count(i)) nb = std::min<int64_t>(nb, row_block(i, j));
          }
          if (nb != INT64_MAX) {
            next_k = bf16 ? static_cast<const void*>(cache.k_block_t_bf16(layer, nb, g)) : cache.k_block_t(layer, nb, g);
            next_v = bf16 ? static_cast<const void*>(cache.v_block_bf16(layer, nb, g)) : cache.v_block(layer, nb, g);
          }
        }
        // kT, v: float or uint16_t (bf16) pages; the kernels widen bf16 on load.
        auto attend_block = [&](const auto* kT, const auto* v) {
          for (int64_t i = 0; i < nr; ++i) {
            if (next[i] >= row_count(i) || row_block(i, next[i]) != b) continue;
            ++next[i];
            const int64_t pos = run.first_pos + r0 + i;
            const int n_keys = int(std::min<int64_t>(B, pos + 1 - b * B));  // causal inside the local block
            float* o = out + ((r0 + i) * run.q_heads + int64_t(g) * Hg) * hd;
            qk_scores(q.data() + i * per_row, Hg, hd, kT, B, n_keys, S.data(), B, next_k, next_k ? page : 0);
            softmax_block_update(S.data(), Hg, B, n_keys, m.data() + i * Hg, l.data() + i * Hg, o, hd);
            pv_accumulate(S.data(), Hg, B, n_keys, v, hd, o, next_v, next_v ? page : 0);
            next_k = next_v = nullptr;  // requested once per tile
          }
        };
        if (bf16) attend_block(cache.k_block_t_bf16(layer, b, g), cache.v_block_bf16(layer, b, g));
        else attend_block(cache.k_block_t(layer, b, g), cache.v_block(layer, b, g));
      }
      for (int64_t i = 0; i < nr; ++i) {
        float* o = out + ((r0 + i) * run.q_heads + int64_t(g) * Hg) * hd;
        for (int h = 0; h < Hg; ++h)
          for (int d = 0; d < hd; ++d) o[h * hd + d] /= l[size_t(i * Hg + h)];
      }
    }
  });
}

}  // namespace m3
