// The q·k tiles the Highway attention sources share: attention_scores_simd.cpp stores scores,
// attention_block_max_simd.cpp folds them into block maxima (the index branch). Each passes its
// own sink to the same tiles; two sources so that their targets' copies compile side by side (the
// tiles are most of the attention kernels' build time, docs/BENCHMARKS.md §0u). Same bits on
// every target: each score is one fused multiply-add chain over d in order.
//
// Highway's per-target header convention, as attention_simd-inl.h (included first).
#if defined(M3_ATTENTION_ATTENTION_QK_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef M3_ATTENTION_ATTENTION_QK_TILES_INL_H_
#undef M3_ATTENTION_ATTENTION_QK_TILES_INL_H_
#else
#define M3_ATTENTION_ATTENTION_QK_TILES_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "attention/attention_simd-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace HWY_NAMESPACE {
namespace {

// A tile is Q queries × V key vectors (V <= 4, Q·V <= kQkAcc <= 16) of named accumulators
// acc0..acc15, accumulator k for query k / V and key vector k % V; the unused ones compile away
// (SVE vectors cannot live in arrays). Few keys per block (small blocks) get tall tiles, so that
// every tile keeps kQkAcc independent FMA chains.
#define M3_ZERO(k) VF acc##k = hn::Zero(df);

// The k-th of sixteen vectors, chosen at compile time (k < 16).
template <int k>
HWY_INLINE VF Pick16(VF v0, VF v1, VF v2, VF v3, VF v4, VF v5, VF v6, VF v7, VF v8, VF v9, VF v10, VF v11, VF v12,
                     VF v13, VF v14, VF v15) {
  if constexpr (k < 4) return Pick<k>(v0, v1, v2, v3);
  else if constexpr (k < 8) return Pick<k - 4>(v4, v5, v6, v7);
  else if constexpr (k < 12) return Pick<k - 8>(v8, v9, v10, v11);
  else return Pick<k - 12>(v12, v13, v14, v15);
}

// The V key vectors of a tile: vector j's keys in dimension d start at at[j] + d·kt_stride. One
// block's consecutive vectors, or vectors of several blocks' pages (QkPagedKeys).
template <typename T>
struct KeyVectors {
  const T* at[4];
  bool last_row_whole = false;  // full vectors readable in the last row too (pages: always)
};

// Scores of Q queries (rows of q, stride dim) against the tile's V·N keys; `avail` of them are
// valid (kTail: fewer than V·N, the lanes past them are masked to 0; every row of kT but the last
// must still be readable to full vectors, which holds for a block's keys when t0 + V·N <=
// kt_stride, and for whole pages; the last row's partial vectors go through buffers, since a
// caller may pass kT in the middle of its rows). Calls sink(i, V, v0, v1, v2, v3) for each query
// with its V score vectors. Not inlined: each tile shape gets its own register allocation (one
// function holding every shape spilled its accumulators).
template <int Q, int V, bool kTail, typename T, class Sink>
HWY_NOINLINE void QkTile(const float* q, int dim, const KeyVectors<T>& kv, int kt_stride, int avail, Sink& sink,
                         Prefetch& pf) {
  static_assert(Q * V <= 16 && V <= 4, "a tile has at most 16 accumulators and 4 key vectors");
  const DF df;
  const int N = int(hn::Lanes(df));
  auto lanes_of = [&](int j) { return size_t(kTail ? Min(N, avail - j * N > 0 ? avail - j * N : 0) : N); };
  const auto m0 = hn::FirstN(df, lanes_of(0)), m1 = hn::FirstN(df, lanes_of(1));
  const auto m2 = hn::FirstN(df, lanes_of(2)), m3 = hn::FirstN(df, lanes_of(3));
  M3_ACC16(M3_ZERO)
#define M3_QK_FMA(k)                                                                        \
  if constexpr (k < Q * V)                                                                  \
    acc##k = MulAddBroadcast(Pick<k % V>(k0, k1, k2, k3), q + int64_t(k / V) * dim + d, acc##k);
  const int masked_rows = kTail && !kv.last_row_whole ? dim - 1 : dim;
  int d = 0;
  const T* const p0 = kv.at[0];
  const T* const p1 = kv.at[V > 1 ? 1 : 0];
  const T* const p2 = kv.at[V > 2 ? 2 : 0];
  const T* const p3 = kv.at[V > 3 ? 3 : 0];
  for (; d < masked_rows; ++d) {
    pf.Step();
    const int64_t r = int64_t(d) * kt_stride;
    const VF k0 = kTail ? hn::IfThenElseZero(m0, LoadWide(df, p0 + r)) : LoadWide(df, p0 + r);
    const VF k1 = V > 1 ? (kTail ? hn::IfThenElseZero(m1, LoadWide(df, p1 + r)) : LoadWide(df, p1 + r)) : k0;
    const VF k2 = V > 2 ? (kTail ? hn::IfThenElseZero(m2, LoadWide(df, p2 + r)) : LoadWide(df, p2 + r)) : k0;
    const VF k3 = V > 3 ? (kTail ? hn::IfThenElseZero(m3, LoadWide(df, p3 + r)) : LoadWide(df, p3 + r)) : k0;
    M3_ACC16(M3_QK_FMA)
  }
  if (kTail && d < dim) {  // the last row: partial vectors through buffers
    pf.Step();
    const int64_t r = int64_t(d) * kt_stride;
    auto part = [&](int j) { return LoadPart(df, kv.at[j] + r, int(lanes_of(j))); };
    const VF k0 = part(0);
    const VF k1 = V > 1 ? part(1) : k0;
    const VF k2 = V > 2 ? part(2) : k0;
    const VF k3 = V > 3 ? part(3) : k0;
    M3_ACC16(M3_QK_FMA)
  }
#undef M3_QK_FMA
  // Row i's vectors are acc(i·V + j); the ones past V are not read by the sink.
#define M3_ALL_ACC acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7, acc8, acc9, acc10, acc11, acc12, acc13, acc14, acc15
#define M3_ROW_VEC(i, j) Pick16<i * V + (j < V ? j : 0)>(M3_ALL_ACC)
#define M3_QK_ROW(i) \
  if constexpr (i < Q) sink(i, V, M3_ROW_VEC(i, 0), M3_ROW_VEC(i, 1), M3_ROW_VEC(i, 2), M3_ROW_VEC(i, 3));
  M3_ACC16(M3_QK_ROW)
#undef M3_QK_ROW
#undef M3_ROW_VEC
#undef M3_ALL_ACC
}

// Q queries against the keys [t0, n_keys) where a full-width load would leave the rows of kT (a
// block narrower than the vectors): one scalar fused multiply-add chain per score, the same bits
// as the tiles.
template <int Q, typename T, class Sink>
HWY_NOINLINE void QkScalar(const float* q, int dim, const T* kT, int kt_stride, int t0, int n_keys, Sink& sink) {
  const DF df;
  const int N = int(hn::Lanes(df));
  alignas(64) float s[kMaxLanes];
  sink.t0 = t0;
  for (int i = 0; i < Q; ++i) {
    for (int t = 0; t < N; ++t) {
      float acc = 0.0f;
      if (t0 + t < n_keys)
        for (int d = 0; d < dim; ++d)
          acc = __builtin_fmaf(q[int64_t(i) * dim + d], WidenOne(kT[int64_t(d) * kt_stride + t0 + t]), acc);
      s[t] = acc;
    }
    const VF v = hn::Load(df, s);
    sink(i, 1, v, v, v, v);
  }
}

// Q queries against every key: tiles of V vectors, the last one masked.
template <int Q, int V, typename T, class Sink>
HWY_INLINE void QkKeys(const float* q, int dim, const T* kT, int kt_stride, int n_keys, Sink& sink, Prefetch& pf) {
  const int N = int(hn::Lanes(DF()));
  // The first `width` vectors from key t0; the unused entries repeat the first, so that no pointer
  // past the row is formed.
  auto from = [&](int t0, int width) {
    auto at = [&](int j) { return kT + t0 + (j < width ? j * N : 0); };
    return KeyVectors<T>{{at(0), at(1), at(2), at(3)}};
  };
  int t0 = 0;
  for (; t0 + V * N <= n_keys; t0 += V * N) {
    sink.t0 = t0;
    QkTile<Q, V, false>(q, dim, from(t0, V), kt_stride, V * N, sink, pf);
  }
  if (t0 == n_keys) return;
  sink.t0 = t0;
  if (t0 + V * N <= kt_stride) return QkTile<Q, V, true>(q, dim, from(t0, V), kt_stride, n_keys - t0, sink, pf);
  // A block narrower than the tile: single vectors, the last one scalar if it would leave the row.
  for (; t0 + N <= n_keys; t0 += N) {
    sink.t0 = t0;
    QkTile<Q, 1, false>(q, dim, from(t0, 1), kt_stride, N, sink, pf);
  }
  if (t0 == n_keys) return;
  sink.t0 = t0;
  if (t0 + N <= kt_stride) QkTile<Q, 1, true>(q, dim, from(t0, 1), kt_stride, n_keys - t0, sink, pf);
  else QkScalar<Q>(q, dim, kT, kt_stride, t0, n_keys, sink);
}

// Q queries against a step's blocks side by side, each block's K page in its own place: pages[p]
// ([dim][B]) holds keys [p·B, (p + 1)·B) of the step, all B valid but in the last page. Needs B to
// be a multiple of the vector width, so that no vector spans two pages. Tiles of V vectors as
// QkKeys; the last one is not masked: its lanes past n_keys read the rest of the last page (whole
// pages), or repeat its last vector, and the sink drops their scores. The same bits as the keys in
// one block. Masking them cost a move per vector and row (AVX2: 6% of a tiny-shape sparse row).
template <int Q, int V, typename T, class Sink>
HWY_INLINE void QkPagedKeys(const float* q, int dim, const T* const* pages, int B, int n_keys, Sink& sink,
                            Prefetch& pf) {
  const int N = int(hn::Lanes(DF()));
  const int per_page = B / N, vecs = (n_keys + N - 1) / N;
  auto vec = [&](int jv) { return pages[jv / per_page] + (jv % per_page) * N; };
  auto from = [&](int jv) {  // past the last vector: the last again
    auto at = [&](int j) { return vec(jv + j < vecs ? jv + j : vecs - 1); };
    return KeyVectors<T>{{at(0), at(1), at(2), at(3)}, true};
  };
  int jv = 0;
  for (; (jv + V) * N <= n_keys; jv += V) {
    sink.t0 = jv * N;
    QkTile<Q, V, false>(q, dim, from(jv), B, V * N, sink, pf);
  }
  if (jv * N == n_keys) return;
  sink.t0 = jv * N;
  QkTile<Q, V, false>(q, dim, from(jv), B, V * N, sink, pf);
}

// The keys of a q·k call: one block (kT, its row stride) or a step's pages.
template <typename T>
struct BlockKeys {
  const T* kT;
  int kt_stride, n_keys;
  template <int R, int V, class Sink>
  HWY_INLINE void Run(const float* q, int dim, Sink& sink, Prefetch& pf) const {
    QkKeys<R, V>(q, dim, kT, kt_stride, n_keys, sink, pf);
  }
};
template <typename T>
struct PagedKeys {
  const T* const* pages;
  int B, n_keys;
  template <int R, int V, class Sink>
  HWY_INLINE void Run(const float* q, int dim, Sink& sink, Prefetch& pf) const {
    QkPagedKeys<R, V>(q, dim, pages, B, n_keys, sink, pf);
  }
};

template <int R>
struct TileRows {
  static constexpr int kRows = R;
};

// The queries in tiles of Q (as tall as the accumulators allow for V), the rest in tiles of 8,
// 4, 2 and 1 (those below Q). AVX2's tiles of 6 leave 2 queries of every 6k + 2 (a dense call of
// the small and tiny presets has 32) to a tile of 4 chains, half the rate of a tile of 8 (a
// multiply-add's latency is 4 cycles, 2 issue a cycle): the last 8 go as two tiles of 4.
template <int Q, int V, class Keys, class Sink>
HWY_INLINE void QkRows(const float* q, int nq, int dim, const Keys& keys, Sink& sink, Prefetch& pf) {
  int i0 = 0;
  auto rows = [&](auto height, int end) {
    constexpr int R = decltype(height)::kRows;
    for (; i0 + R <= end; i0 += R) {
      sink.i0 = i0;
      keys.template Run<R, V>(q + int64_t(i0) * dim, dim, sink, pf);
    }
  };
  if constexpr (Q != 16 && Q != 8 && Q != 4 && Q != 2 && Q != 1)
    rows(TileRows<Q>{}, Q == 6 && nq % 6 == 2 && nq >= 8 ? nq - 8 : nq);
  if constexpr (Q >= 16) rows(TileRows<16>{}, nq);
  if constexpr (Q >= 8) rows(TileRows<8>{}, nq);
  if constexpr (Q >= 4) rows(TileRows<4>{}, nq);
  if constexpr (Q >= 2) rows(TileRows<2>{}, nq);
  rows(TileRows<1>{}, nq);
}

// Key vectors per tile: up to 4, fewer when the block has fewer keys (small blocks get taller
// tiles of kQkAcc / V queries).
constexpr int kWide = kQkAcc >= 16 ? 4 : 2;  // AVX2: 6 queries x 2 vectors fill its 12 accumulators
HWY_INLINE int TileVectors(int n_keys) {
  const int N = int(hn::Lanes(DF()));
  const int vecs = (n_keys + N - 1) / N;
  return vecs >= kWide ? kWide : vecs >= 2 ? 2 : 1;
}

// AVX2 with at most 2 queries (a sparse row's heads of a KV group, the tiny preset's 2) and 4 key
// vectors or more: tiles of 2 queries x 4 vectors, 8 chains where 2 x 2 kept 4, each waiting out its
// multiply-add's latency (2 x 4 accumulators, 4 keys and a broadcast still fit 16 registers).
constexpr bool kFewQueriesWide = kWide < 4;
HWY_INLINE bool FewQueriesWide(int nq, int n_keys) {
  return kFewQueriesWide && nq <= 2 && n_keys >= 4 * int(hn::Lanes(DF()));
}

// Inner-loop steps of a q·k call, at most: the prefetch is spread over them, so an overestimate
// would leave the end of the next page unrequested.
HWY_INLINE int64_t QkSteps(int nq, int dim, int n_keys) {
  const int N = int(hn::Lanes(DF()));
  const bool few = FewQueriesWide(nq, n_keys);
  const int V = few ? 4 : TileVectors(n_keys), Q = few ? 2 : kQkAcc / V;
  return int64_t(dim) * (nq > Q ? nq / Q : 1) * (n_keys > V * N ? n_keys / (V * N) : 1);
}

template <class Keys, class Sink>
HWY_INLINE void QkForTiles(const float* q, int nq, int dim, const Keys& keys, Sink& sink, Prefetch& pf) {
  const int n_keys = keys.n_keys;
  if constexpr (kFewQueriesWide) {
    if (FewQueriesWide(nq, n_keys)) return QkRows<2, 4>(q, nq, dim, keys, sink, pf);
  }
  const int V = TileVectors(n_keys);
  if (V == kWide) QkRows<kQkAcc / kWide, kWide>(q, nq, dim, keys, sink, pf);
  else if (V == 2) QkRows<kQkAcc / 2, 2>(q, nq, dim, keys, sink, pf);
  else QkRows<kQkAcc, 1>(q, nq, dim, keys, sink, pf);
}

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace m3
#endif  // HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
HWY_AFTER_NAMESPACE();

#endif  // M3_ATTENTION_ATTENTION_QK_TILES_INL_H_ toggle
