#include "attention/msa_attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "attention/attention_kernels.h"
#include "attention/msa_select.h"

namespace m3 {

namespace {

// A page of an fp8 cache: E4M3 bytes and the UE8M0 scale of each key (or value row).
struct Fp8Page {
  const uint8_t* data;
  const uint8_t* scales;
};

// The kernels for each page type (float, bf16 bits, fp8), so the walks below are written once.
template <typename T>
void scores_of(const float* q, int nq, int dim, const T* kT, int B, int n_keys, float* S, int ld, const void* pf,
               size_t pf_bytes) {
  qk_scores(q, nq, dim, kT, B, n_keys, S, ld, pf, pf_bytes);
}
void scores_of(const float* q, int nq, int dim, Fp8Page kT, int B, int n_keys, float* S, int ld, const void* pf,
               size_t pf_bytes) {
  qk_scores(q, nq, dim, kT.data, kT.scales, B, n_keys, S, ld, pf, pf_bytes);
}
template <typename T>
void values_of(const float* P, int heads, int ld, int n_keys, const T* v, int hd, float* o, const void* pf,
               size_t pf_bytes) {
  pv_accumulate(P, heads, ld, n_keys, v, hd, o, pf, pf_bytes);
}
void values_of(const float* P, int heads, int ld, int n_keys, Fp8Page v, int hd, float* o, const void* pf,
               size_t pf_bytes) {
  pv_accumulate(P, heads, ld, n_keys, v.data, v.scales, hd, o, pf, pf_bytes);
}

// Calls f(kT, v) with the pages as the cache stores them.
template <typename F>
void with_pages(const CachePageView& kT, const CachePageView& v, F&& f) {
  switch (kT.dtype) {
    case DType::BF16: f(kT.as<uint16_t>(), v.as<uint16_t>()); break;
    case DType::F8_E4M3: f(Fp8Page{kT.as<uint8_t>(), kT.scales}, Fp8Page{v.as<uint8_t>(), v.scales}); break;
    default: f(kT.as<float>(), v.as<float>()); break;
  }
}

// The pages of a softmax step's blocks, in the step's order: one q·k call and one P·V call cover
// them all (qk_scores_paged, pv_accumulate_paged), so that a q·k tile takes key vectors of several
// small blocks at once (a block of the tiny preset is 16 keys x 2 heads: alone, too few chains to
// hide a multiply-add's latency). Each score is still one chain over the dims and each output one
// chain over the step's keys in order: the same bits as a call per block.
template <typename T>
struct StepPages {
  std::vector<const T*> k, v;
  void clear() {
    k.clear();
    v.clear();
  }
  void put(const T* kT, const T* vp) {
    k.push_back(kT);
    v.push_back(vp);
  }
  void scores(const float* q, int nq, int dim, int B, int n_keys, float* S, int ld) const {
    qk_scores_paged(q, nq, dim, k.data(), B, n_keys, S, ld);
  }
  void values(const float* P, int heads, int ld, int n_keys, int B, int hd, float* o) const {
    pv_accumulate_paged(P, heads, ld, n_keys, v.data(), B, hd, o);
  }
};
template <>
struct StepPages<Fp8Page> {
  std::vector<const uint8_t*> k, v, ks, vs;
  void clear() {
    k.clear();
    v.clear();
    ks.clear();
    vs.clear();
  }
  void put(Fp8Page kT, Fp8Page vp) {
    k.push_back(kT.data);
    ks.push_back(kT.scales);
    v.push_back(vp.data);
    vs.push_back(vp.scales);
  }
  void scores(const float* q, int nq, int dim, int B, int n_keys, float* S, int ld) const {
    qk_scores_paged(q, nq, dim, k.data(), ks.data(), B, n_keys, S, ld);
  }
  void values(const float* P, int heads, int ld, int n_keys, int B, int hd, float* o) const {
    pv_accumulate_paged(P, heads, ld, n_keys, v.data(), vs.data(), B, hd, o);
  }
};

// The page type a cache's pages are read as (float, bf16 bits, fp8).
template <typename P>
P page_as(const CachePageView& view) {
  return view.as<std::remove_const_t<std::remove_pointer_t<P>>>();
}
template <>
Fp8Page page_as<Fp8Page>(const CachePageView& view) {
  return {view.as<uint8_t>(), view.scales};
}

}  // namespace

void msa_select_run(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run, BlockSelection& sel,
                    Workspace* ws) {
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
  const int64_t sparse_rows = R - first_sparse_row;
  // (rows needing scores)·G × n_blocks
  std::vector<float> own;
  const size_t n_scores = sparse_rows > 0 && n_blocks > 0 ? size_t(sparse_rows * G * n_blocks) : 0;
  float* scores = ws != nullptr ? ws->get<float>(Workspace::Buffer::BlockScores, n_scores) : nullptr;
  if (ws == nullptr) {
    own.resize(n_scores);
    scores = own.data();
  }
  // Row r reads the scores of blocks [0, local(r)) only (msa_select_blocks), and each of those is
  // written below (block b is scored from first_row_beyond(b) <= r on), so nothing is filled first.
  if (n_scores > 0) {
    // Blocks a group at a time: each score row then gets the group's kGroup scores as one run of
    // consecutive floats (4 cache lines), where one block at a time wrote a float to every row,
    // each on its own line and page (the tiny preset at 64K: 1,024 rows 16 KiB apart). A call's
    // queries, transposed once by the queries-in-lanes tiles, serve up to 64 pages (16 left the
    // transposition 15% of the tiny preset's index time). So a group is 64 blocks where there are
    // enough blocks for every thread.
    //
    // A task is one group of blocks against one slice of the rows: where there are few groups (M3's
    // shape at 16K: 128 blocks, 2 groups), the rows are cut too, so that the pool has several tasks
    // per thread to balance (two tasks ran 1.5x faster on 2 threads than on one, docs/BENCHMARKS.md
    // §0za). The transposition per page is the same: a call's queries are its slice's rows.
    constexpr int64_t kGroup = 64;
    constexpr int64_t kMinSliceRows = 64;  // rows (times G score rows) per call, for the tiles' width
    const int64_t group = std::min<int64_t>(kGroup, (n_blocks + pool.size() - 1) / pool.size());
    const int64_t n_groups = (n_blocks + group - 1) / group;
    const int64_t want = int64_t(pool.size()) * ThreadPool::kRangesPerThread;
    const int64_t slices =
        std::clamp<int64_t>((want + n_groups - 1) / n_groups, 1, std::max<int64_t>(1, sparse_rows / kMinSliceRows));
    const int64_t slice_rows = (sparse_rows + slices - 1) / slices;
    pool.parallel_for(n_groups * slices, [&](int64_t task0, int64_t task1) {
      // Column b - g0 of cols holds block b's scores by score row of the slice; a line more than
      // the rows, so that the copy below does not read 64 lines of one L1 set (rows are a power of
      // two).
      const int64_t col_stride = slice_rows * G + 16;
      std::vector<float> cols(size_t(kGroup * col_stride));
      int64_t group_r0[kGroup];
      for (int64_t task = task0; task < task1; ++task) {
        const int64_t g0 = (task / slices) * group, g1 = std::min(g0 + group, n_blocks);
        const int64_t s0 = first_sparse_row + (task % slices) * slice_rows;  // the slice: rows [s0, s1)
        const int64_t s1 = std::min(s0 + slice_rows, R);
        // Blocks [b, e) of the group, scored by rows [r0, s1), in one call: a small block alone is
        // too narrow a tile (qk_block_max_paged).
        auto score_pages = [&](int64_t b, int64_t e, int64_t r0) {
          const int n = int(e - b), nq = int((s1 - r0) * G);
          const float* iq = run.iq + r0 * G * id;
          float* col = cols.data() + (b - g0) * col_stride + (r0 - s0) * G;
          switch (cache.dtype()) {
            case DType::BF16: {
              const uint16_t* p[kGroup];
              for (int64_t x = b; x < e; ++x) p[x - b] = cache.index_k_block_t(layer, x).as<uint16_t>();
              qk_block_max_paged(iq, nq, id, p, n, B, col, int(col_stride));
              break;
            }
            case DType::F8_E4M3: {
              const uint8_t* p[kGroup];
              const uint8_t* sc[kGroup];
              for (int64_t x = b; x < e; ++x) {
                const CachePageView ik = cache.index_k_block_t(layer, x);
                p[x - b] = ik.as<uint8_t>();
                sc[x - b] = ik.scales;
              }
              qk_block_max_paged(iq, nq, id, p, sc, n, B, col, int(col_stride));
              break;
            }
            default: {
              const float* p[kGroup];
              for (int64_t x = b; x < e; ++x) p[x - b] = cache.index_k_block_t(layer, x).as<float>();
              qk_block_max_paged(iq, nq, id, p, n, B, col, int(col_stride));
              break;
            }
          }
        };
        for (int64_t b = g0; b < g1; ++b) group_r0[b - g0] = std::max(s0, first_row_beyond(b));
        for (int64_t b = g0; b < g1; ++b) {
          const int64_t r0 = group_r0[b - g0];
          if (r0 >= s1) continue;
          // This block and the next ones scored by the same rows, in one call: the kernel picks
          // its tiles (qk_block_max_paged; a page at a time, the next one prefetched, where the
          // queries are too few for the queries-in-lanes tiles).
          int64_t e = b + 1;
          while (e < g1 && group_r0[e - g0] == r0) ++e;
          score_pages(b, e, r0);
          b = e - 1;
        }
        // first_row_beyond grows with b: a row is scored by a prefix of the group's blocks. The
        // columns go to the rows 16 at a time, so that both sides stay in L1 (cols is 256 KiB at
        // 1,024 score rows; row by row, each row read 64 lines of it).
        constexpr int64_t kRowTile = 16;
        const int64_t first_i = (s0 - first_sparse_row) * G, end_i = (s1 - first_sparse_row) * G;
        for (int64_t i0 = (group_r0[0] - first_sparse_row) * G; i0 < end_i; i0 += kRowTile) {
          const int64_t i1 = std::min(i0 + kRowTile, end_i);
          for (int64_t b = g0; b < g1; ++b) {
            const float* col = cols.data() + (b - g0) * col_stride;  // col[i - first_i]: score row i
            for (int64_t i = std::max(i0, (group_r0[b - g0] - first_sparse_row) * G); i < i1; ++i)
              scores[i * n_blocks + b] = col[i - first_i] * scale;
          }
        }
      }
    });
  }

  pool.parallel_for(R * G, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> picked;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / G;
      const int64_t local = (run.first_pos + r) / B;
      if (r < first_sparse_row) {
        for (int32_t b = 0; b <= local; ++b) picked.push_back(b);
      } else {
        msa_select_blocks(scores + ((r - first_sparse_row) * G + t % G) * n_blocks, local, K, picked);
      }
      std::copy(picked.begin(), picked.end(), sel.blocks.begin() + t * K);
      sel.count[size_t(t)] = int32_t(picked.size());
      picked.clear();
    }
  }, 8);
}

namespace {

// Every row's attention is defined segment-wise, whatever the thread count or the batching: its
// block list (ascending) is cut into segments of segment_blocks() entries, each gets its own online softmax
// from scratch, and the segments' states are folded by log-sum-exp in order. Prefill folds as it
// walks; a decode step with spare threads computes the segments in parallel and folds them after,
// in the same order with the same arithmetic, so both give the same bits (and prefix-cache reuse
// stays exact) on any machine. MSA rows have at most top-k (16) entries: segments of 8 let a decode
// step use two threads per group (M3: 8 tasks); shorter segments cost prefill more than they give
// decode (each fold touches the row's accumulators: 4 entries cost 8% of sparse prefill at 16K, 8
// cost 5%, docs/BENCHMARKS.md §1). Dense rows get segments of 64 blocks (8K tokens at 128), so a
// decode step at 1M keeps 128 partial states per group.
int segment_blocks(bool sparse) { return sparse ? 8 : 64; }

// Entries of a row's block list per online-softmax step: `span` of them (aligned to multiples of
// span from the list's start, so never across a segment), up to 128 keys a step. Blocks of 128
// keys (M3's) take a step each. With small blocks (the tiny preset's 16 keys) the step's fixed
// work (a maximum, a correction exponential, a sum, the rescale of every accumulator) was a fifth
// of dense attention (docs/BENCHMARKS.md §0l), and most of sparse attention's (§0t). A dense row's
// entries are consecutive blocks, a sparse row's its selected ones. Decode and prefill step alike.
int softmax_span(int block_size, bool sparse) {
  int span = 1;
  while (span * 2 * block_size <= 128 && span * 2 <= segment_blocks(sparse)) span *= 2;
  return span;
}

// (M, L, O) <- the fold of (M, L, O) and a segment's (m, l, o), per head. A fresh (M = -inf, L = 0,
// O = 0) folded with a segment gives that segment's state exactly.
void fold_state(int Hg, int hd, float* M, float* L, float* O, const float* m, const float* l, const float* o) {
  for (int h = 0; h < Hg; ++h) {
    const float mx = std::max(M[h], m[h]);
    const float a = std::exp(M[h] - mx), c = std::exp(m[h] - mx);
    L[h] = L[h] * a + l[h] * c;
    M[h] = mx;
    float* Oh = O + int64_t(h) * hd;
    const float* oh = o + int64_t(h) * hd;
    for (int d = 0; d < hd; ++d) Oh[d] = Oh[d] * a + oh[d] * c;
  }
}

// Calls f with a null page of the type the cache's pages are read as (float, bf16 bits, fp8).
template <typename F>
void with_page_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::BF16: f(static_cast<const uint16_t*>(nullptr)); break;
    case DType::F8_E4M3: f(Fp8Page{}); break;
    default: f(static_cast<const float*>(nullptr)); break;
  }
}
template <typename P>
using StepPagesFor = StepPages<std::remove_const_t<std::remove_pointer_t<P>>>;

// One softmax step over several blocks' pages, block_of(0), ..., block_of(count - 1) of group g:
// scores of nq query heads (q pre-scaled) into S (rows of ld), the online softmax update of m, l
// and o, then P·V into o; n_keys of the step's keys count (all but the last page's are whole).
template <typename P, class BlockOf>
void paged_step(const KvCache& cache, int layer, int g, int count, const BlockOf& block_of, const float* q, int nq,
                int hd, int n_keys, float* S, int ld, float* m, float* l, float* o, StepPagesFor<P>& step) {
  const int B = cache.shape().block_size;
  step.clear();
  for (int j = 0; j < count; ++j) {
    const int64_t b = block_of(j);
    step.put(page_as<P>(cache.k_block_t(layer, b, g)), page_as<P>(cache.v_block(layer, b, g)));
  }
  step.scores(q, nq, hd, B, n_keys, S, ld);
  softmax_block_update(S, nq, ld, n_keys, m, l, o, hd);
  step.values(S, nq, ld, n_keys, B, hd, o);
}

// Online softmax of one row's Hg query heads (q pre-scaled) over entries [j0, j1) of its block list:
// leaves the running max m, denominator l and the unnormalised sum o (Hg, head_dim); block_of(j) is
// entry j's block. `span` consecutive entries make one softmax step (softmax_span); S holds Hg rows
// of span x B scores. A step of several entries reads their pages through `step` (StepPages).
template <typename P, class BlockOf>
void attend_row_blocks(const KvCache& cache, int layer, int g, int64_t pos, const float* q, int Hg, int hd,
                       const BlockOf& block_of, int32_t j0, int32_t j1, int span, float* m, float* l, float* o,
                       float* S, StepPagesFor<P>& step) {
  const int B = cache.shape().block_size;
  const int ld = span * B;
  const size_t page = size_t(hd) * B * dtype_size(cache.dtype());
  std::fill(m, m + Hg, -INFINITY);
  std::fill(l, l + Hg, 0.0f);
  std::fill(o, o + size_t(Hg) * hd, 0.0f);
  auto keys_of = [&](int64_t b) { return int(std::min<int64_t>(B, pos + 1 - b * B)); };  // causal inside the local block
  for (int32_t u = j0; u < j1; u += span) {
    const int32_t u1 = std::min(u + span, j1);
    int n_keys = 0;
    if (u1 - u > 1) {
      for (int32_t j = u; j < u1; ++j) n_keys += keys_of(block_of(j));
      paged_step<P>(cache, layer, g, u1 - u, [&](int j) { return block_of(u + j); }, q, Hg, hd, n_keys, S, ld, m, l, o,
                    step);
      continue;
    }
    // One block: read in place. The pages of the next step are requested into L2 while this one
    // is computed, the K page during the q·k call and the V page during the P·V call.
    const int64_t b = block_of(u);
    const int64_t nb = u + span < j1 ? block_of(u + span) : -1;
    n_keys = keys_of(b);
    const void* next_k = nb >= 0 ? cache.k_block_t(layer, nb, g).data : nullptr;
    const void* next_v = nb >= 0 ? cache.v_block(layer, nb, g).data : nullptr;
    scores_of(q, Hg, hd, page_as<P>(cache.k_block_t(layer, b, g)), B, n_keys, S, ld, next_k, next_k ? page : 0);
    softmax_block_update(S, Hg, ld, n_keys, m, l, o, hd);
    values_of(S, Hg, ld, n_keys, page_as<P>(cache.v_block(layer, b, g)), hd, o, next_v, next_v ? page : 0);
  }
}

// Sparse rows whose blocks are small (softmax_span > 1): each row and KV group on its own, its list
// in segments and steps as a decode split computes them (attend_row_blocks), the segments folded in
// order, so decode and prefill give the same bits. The tile walk below shares a page between the
// rows of a tile that selected it; scattered selections of small blocks share few, and a step over
// several of them is worth more (docs/BENCHMARKS.md §0t).
void sparse_rows_run(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run,
                     const BlockSelection& sel, float* out) {
  const int G = run.kv_heads, hd = run.head_dim, Hg = run.q_heads / run.kv_heads;
  const int B = cache.shape().block_size;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const int seg = segment_blocks(true), span = softmax_span(B, true);
  with_page_type(cache.dtype(), [&](auto tag) {
    using P = decltype(tag);
    pool.parallel_for(run.rows * G, [&](int64_t t0, int64_t t1) {
      StepPagesFor<P> step;
      const size_t per_row = size_t(Hg) * hd;
      std::vector<float> q(per_row), S(size_t(Hg) * span * B), m(static_cast<size_t>(Hg)), l(m.size()), o(per_row);
      std::vector<float> M(m.size()), L(m.size()), O(per_row);
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t r = task / G;
        const int g = int(task % G);
        const int64_t pos = run.first_pos + r;
        const float* qg = run.q + (r * run.q_heads + int64_t(g) * Hg) * hd;
        for (size_t e = 0; e < per_row; ++e) q[e] = qg[e] * scale;
        const int32_t* list = sel.blocks.data() + task * sel.topk;
        const int32_t count = sel.count[size_t(task)];
        auto block_of = [&](int32_t j) { return list[j]; };
        const float* res = o.data();  // the result is res / den
        const float* den = l.data();
        if (count <= seg) {
          attend_row_blocks<P>(cache, layer, g, pos, q.data(), Hg, hd, block_of, 0, count, span, m.data(), l.data(),
                               o.data(), S.data(), step);
        } else {
          std::fill(M.begin(), M.end(), -INFINITY);
          std::fill(L.begin(), L.end(), 0.0f);
          std::fill(O.begin(), O.end(), 0.0f);
          for (int32_t j0 = 0; j0 < count; j0 += seg) {
            attend_row_blocks<P>(cache, layer, g, pos, q.data(), Hg, hd, block_of, j0, std::min(j0 + seg, count), span,
                                 m.data(), l.data(), o.data(), S.data(), step);
            fold_state(Hg, hd, M.data(), L.data(), O.data(), m.data(), l.data(), o.data());
          }
          res = O.data();
          den = L.data();
        }
        float* dst = out + (r * run.q_heads + int64_t(g) * Hg) * hd;
        for (int h = 0; h < Hg; ++h)
          for (int d = 0; d < hd; ++d) dst[h * hd + d] = res[h * hd + d] / den[h];
      }
    });
  });
}

// One row (a decode step) with more threads than KV groups: the segments of every group are
// attended in parallel (flash-decoding), then folded in order (see segment_blocks).
void attention_row_split(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run,
                         const BlockSelection* sel, float* out) {
  const int G = run.kv_heads, hd = run.head_dim, Hg = run.q_heads / run.kv_heads;
  const int B = cache.shape().block_size;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const int64_t pos = run.first_pos;
  const int seg = segment_blocks(sel != nullptr), span = softmax_span(B, sel != nullptr);
  auto count = [&](int g) { return sel ? sel->count[size_t(g)] : int32_t(pos / B + 1); };
  int32_t segs = 0;  // segments of the longest list; shorter lists leave their last tasks idle
  for (int g = 0; g < G; ++g) segs = std::max(segs, (count(g) + seg - 1) / seg);
  std::vector<float> pm(size_t(G) * segs * Hg), pl(pm.size()), po(pm.size() * size_t(hd));

  with_page_type(cache.dtype(), [&](auto tag) {
    using P = decltype(tag);
    pool.parallel_for(int64_t(G) * segs, [&](int64_t t0, int64_t t1) {
      std::vector<float> q(size_t(Hg) * hd), S(size_t(Hg) * span * B);
      StepPagesFor<P> step;
      for (int64_t task = t0; task < t1; ++task) {
        const int g = int(task / segs);
        const int32_t j0 = int32_t(task % segs) * seg, j1 = std::min(j0 + seg, count(g));
        if (j0 >= j1) continue;
        const float* qg = run.q + int64_t(g) * Hg * hd;
        for (size_t e = 0; e < q.size(); ++e) q[e] = qg[e] * scale;
        auto block_of = [&](int32_t j) { return sel ? sel->blocks[size_t(g) * sel->topk + size_t(j)] : j; };
        attend_row_blocks<P>(cache, layer, g, pos, q.data(), Hg, hd, block_of, j0, j1, span, pm.data() + task * Hg,
                             pl.data() + task * Hg, po.data() + task * Hg * hd, S.data(), step);
      }
    });
  });

  std::vector<float> M(static_cast<size_t>(Hg)), L(static_cast<size_t>(Hg));
  for (int g = 0; g < G; ++g) {
    float* O = out + int64_t(g) * Hg * hd;
    std::fill(M.begin(), M.end(), -INFINITY);
    std::fill(L.begin(), L.end(), 0.0f);
    std::fill(O, O + int64_t(Hg) * hd, 0.0f);
    const int32_t n = (count(g) + seg - 1) / seg;
    for (int32_t k = 0; k < n; ++k) {
      const int64_t task = int64_t(g) * segs + k;
      fold_state(Hg, hd, M.data(), L.data(), O, pm.data() + task * Hg, pl.data() + task * Hg, po.data() + task * Hg * hd);
    }
    for (int h = 0; h < Hg; ++h)
      for (int d = 0; d < hd; ++d) O[h * hd + d] /= L[size_t(h)];
  }
}

}  // namespace

namespace {

// The pages of a dense unit of several consecutive blocks (softmax_span), for one q·k and one P·V
// call over all of them (paged_step): a block of 16 keys alone gave AVX-512 tiles of 16 query heads
// x 1 key vector, one broadcast per multiply-add. One StepPages per page type, picked by the cache's.
struct UnitPages {
  StepPages<float> f32;
  StepPages<uint16_t> bf16;
  StepPages<Fp8Page> fp8;
  // paged_step over blocks [b0, b0 + blocks) of group g.
  void step(const KvCache& cache, int layer, int g, int64_t b0, int blocks, const float* q, int nq, int hd, int n_keys,
            float* S, int ld, float* m, float* l, float* o) {
    with_page_type(cache.dtype(), [&](auto tag) {
      paged_step<decltype(tag)>(cache, layer, g, blocks, [&](int j) { return b0 + j; }, q, nq, hd, n_keys, S, ld, m,
                                l, o, of(tag));
    });
  }

 private:
  StepPages<float>& of(const float*) { return f32; }
  StepPages<uint16_t>& of(const uint16_t*) { return bf16; }
  StepPages<Fp8Page>& of(Fp8Page) { return fp8; }
};

}  // namespace

void attention_run(ThreadPool& pool, const KvCache& cache, int layer, const AttentionRun& run,
                   const BlockSelection* sel, float* out) {
  const int G = run.kv_heads, hd = run.head_dim, Hg = run.q_heads / run.kv_heads;
  const int B = cache.shape().block_size;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const int seg = segment_blocks(sel != nullptr), span = softmax_span(B, sel != nullptr);
  // A decode step has one task per KV group; with more threads than groups its segments run in
  // parallel (same bits as the walk below).
  if (run.rows == 1 && run.split_decode && pool.size() > G) {
    attention_row_split(pool, cache, layer, run, sel, out);
    return;
  }
  if (sel != nullptr && span > 1) {
    sparse_rows_run(pool, cache, layer, run, *sel, out);
    return;
  }
  // Rows are processed in tiles per KV group, walking the union of the tile's blocks in ascending
  // order: a K/V block is loaded once for every row and query head of the tile that uses it. Each
  // row still sees its own blocks in ascending order, so its result does not depend on the tile
  // (decode, chunked and one-shot prefill give the same bits). Larger tiles share more blocks (with
  // scattered selections a page of an 8-row tile is used by about one row, so every use was a DRAM
  // read); up to 128 rows the tile's running accumulators (128 rows x 16 heads x 128 dims fp32 =
  // 1 MiB) stay in L2 (the segment folds, touched once per segment, come on top). The tile still
  // leaves at least two tasks per thread. Measured in docs/BENCHMARKS.md §1.
  const int64_t tile_rows = std::clamp<int64_t>(run.rows * G / (2 * int64_t(pool.size())), 8, 128);
  const int64_t tiles = (run.rows + tile_rows - 1) / tile_rows;
  // A unit is what one softmax step covers: a block of a sparse row's list (blocks of 128 keys and
  // more; smaller ones went to sparse_rows_run), or `span` consecutive blocks of a dense row
  // (softmax_span), whose scores sit side by side in S rows of ld floats.
  const int ld = span * B;
  // Rows per kernel call when consecutive rows share a whole unit: a score buffer of ~16 KiB.
  const int64_t batch_rows = std::max<int64_t>(1, 4096 / (int64_t(Hg) * ld));

  pool.parallel_for(tiles * G, [&](int64_t t0, int64_t t1) {
    const size_t per_row = static_cast<size_t>(Hg) * hd;
    std::vector<float> q(size_t(tile_rows) * per_row), S(size_t(batch_rows) * Hg * ld);
    std::vector<float> m(static_cast<size_t>(tile_rows * Hg)), l(static_cast<size_t>(tile_rows * Hg));
    // Per row: entries of its list done, and the fold of its finished segments (M, L, O); the
    // current segment's state is m, l and the row's accumulators in `acc` (rows next to each other,
    // so that a run of rows is one batch of query heads for the kernels).
    std::vector<int32_t> done(static_cast<size_t>(tile_rows));
    std::vector<float> M(m.size()), L(m.size()), O(size_t(tile_rows) * per_row), acc(O.size());
    std::vector<uint64_t> uses;  // (unit << 32 | row) of every unit use in the tile, ascending
    UnitPages unit_pages;
    const size_t page = size_t(hd) * B * dtype_size(cache.dtype());
    for (int64_t task = t0; task < t1; ++task) {
      const int g = int(task % G);
      const int64_t r0 = (task / G) * tile_rows, nr = std::min(tile_rows, run.rows - r0);
      uses.clear();
      if (sel) {
        for (int64_t i = 0; i < nr; ++i) {
          const int32_t* list = sel->blocks.data() + ((r0 + i) * G + g) * sel->topk;
          for (int32_t j = 0; j < sel->count[size_t((r0 + i) * G + g)]; ++j)
            uses.push_back(uint64_t(list[j]) << 32 | uint64_t(i));
        }
        std::sort(uses.begin(), uses.end());
      } else {  // dense: row i uses units 0..the one of its local block, generated already in order
        const int64_t last = (run.first_pos + r0 + nr - 1) / B / span;
        for (int64_t unit = 0; unit <= last; ++unit)
          for (int64_t i = std::max<int64_t>(0, unit * ld - run.first_pos - r0); i < nr; ++i)
            uses.push_back(uint64_t(unit) << 32 | uint64_t(i));
      }
      for (int64_t i = 0; i < nr; ++i) {
        const float* qg = run.q + ((r0 + i) * run.q_heads + int64_t(g) * Hg) * hd;
        for (size_t e = 0; e < per_row; ++e) q[i * per_row + e] = qg[e] * scale;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(M.begin(), M.end(), -INFINITY);
      std::fill(L.begin(), L.end(), 0.0f);
      std::fill(done.begin(), done.end(), 0);
      auto fold_row = [&](int64_t i, float* o) {  // the row's current segment into its fold; o reset
        fold_state(Hg, hd, M.data() + i * Hg, L.data() + i * Hg, O.data() + i * per_row, m.data() + i * Hg,
                   l.data() + i * Hg, o);
        std::fill(m.data() + i * Hg, m.data() + (i + 1) * Hg, -INFINITY);
        std::fill(l.data() + i * Hg, l.data() + (i + 1) * Hg, 0.0f);
        std::fill(o, o + per_row, 0.0f);
      };
      // Each row meets its units in ascending order (its softmax does not depend on the tile).
      for (size_t u = 0; u < uses.size();) {
        const int64_t unit = int64_t(uses[u] >> 32), b0 = unit * span;  // b0: the unit's first block
        size_t end = u;
        while (end < uses.size() && int64_t(uses[end] >> 32) == unit) ++end;
        // The next unit the tile needs: its K and V pages are requested into L2 while this one is
        // computed (spread over the qk and pv loops of the first rows that use it), so DRAM traffic
        // overlaps the arithmetic: a page is read once per tile, and in decode nothing else would hide it.
        const int64_t next_unit_block = end < uses.size() ? int64_t(uses[end] >> 32) * span : -1;
        const int64_t last_block = (run.first_pos + r0 + nr - 1) / B;  // the last block any row of the tile sees
        auto row_of = [&](size_t k) { return int64_t(uses[k] & 0xffffffffu); };
        auto keys_of = [&](int64_t i) {  // the unit's keys row i sees (causal inside its local block)
          return int(std::min<int64_t>(ld, run.first_pos + r0 + i + 1 - b0 * B));
        };
        // A run of consecutive rows that all see the whole unit is one call per kernel with their
        // query heads stacked (q, m, l and acc rows are adjacent): the tiny preset's blocks hold
        // 2 heads x 16 keys per row, too little work for a call. Every output is still its own
        // chain in the same order, so the batching changes no bits.
        for (size_t k = u; k < end;) {
          const int64_t i = row_of(k);
          const int n_keys = keys_of(i), blocks = (n_keys + B - 1) / B;
          size_t e = k + 1;
          if (n_keys == ld)
            while (e < end && int64_t(e - k) < batch_rows && row_of(e) == row_of(e - 1) + 1 && keys_of(row_of(e)) == ld) ++e;
          for (size_t kk = k; kk < e; ++kk) {
            const int64_t r = row_of(kk);
            if (done[size_t(r)] > 0 && done[size_t(r)] % seg == 0) fold_row(r, acc.data() + r * per_row);  // a new segment
            done[size_t(r)] += (keys_of(r) + B - 1) / B;
          }
          // The next unit's j-th page, requested by this unit's first batch only.
          auto next_page = [&](int j, bool values) -> const void* {
            const int64_t nb = next_unit_block + j;
            if (k != u || next_unit_block < 0 || nb > last_block) return nullptr;
            return values ? cache.v_block(layer, nb, g).data : cache.k_block_t(layer, nb, g).data;
          };
          const int heads = int(e - k) * Hg;
          float* o = acc.data() + i * per_row;
          if (blocks > 1) {  // a dense unit of small blocks: each kernel once over all its pages
            unit_pages.step(cache, layer, g, b0, blocks, q.data() + i * per_row, heads, hd, n_keys, S.data(), ld,
                            m.data() + i * Hg, l.data() + i * Hg, o);
            k = e;
            continue;
          }
          // One block, read in place with the next unit's pages requested (kT, v: float, uint16_t
          // (bf16) or Fp8Page pages; the kernels widen them on load).
          const void* pf_k = next_page(0, false);
          const void* pf_v = next_page(0, true);
          with_pages(cache.k_block_t(layer, b0, g), cache.v_block(layer, b0, g), [&](auto kT, auto v) {
            scores_of(q.data() + i * per_row, heads, hd, kT, B, n_keys, S.data(), ld, pf_k, pf_k ? page : 0);
            softmax_block_update(S.data(), heads, ld, n_keys, m.data() + i * Hg, l.data() + i * Hg, o, hd);
            values_of(S.data(), heads, ld, n_keys, v, hd, o, pf_v, pf_v ? page : 0);
          });
          k = e;
        }
        u = end;
      }
      for (int64_t i = 0; i < nr; ++i) {
        float* o = acc.data() + i * per_row;
        const float* denom = l.data() + i * Hg;
        if (done[size_t(i)] > seg) {  // several segments: fold the last one, the result is O / L
          fold_row(i, o);
          o = O.data() + i * per_row;
          denom = L.data() + i * Hg;
        }
        float* dst = out + ((r0 + i) * run.q_heads + int64_t(g) * Hg) * hd;
        for (int h = 0; h < Hg; ++h)
          for (int d = 0; d < hd; ++d) dst[h * hd + d] = o[h * hd + d] / denom[h];
      }
    }
  });
}

}  // namespace m3
