// The attention inner loops from one source for every SIMD target (Google Highway): AVX2+FMA,
// AVX-512, NEON and SVE tables of AttentionKernels (base/cpu_dispatch.h picks one at run time).
// foreach_target.h compiles this file once per target, each copy in its own namespace
// (m3::N_AVX2, m3::N_AVX3, ...) with that target's code generation; the HWY_ONCE part at the end
// hands out the tables. Nothing here instantiates a std:: template (an out-of-line copy built for
// one target could be picked by the linker for code that runs on another).
//
// Same bits on every vector width: each score is one fused multiply-add chain over d in order,
// each P.V output one chain over keys in order, the exp polynomial uses the same operations on
// every target, and a softmax denominator is summed in a fixed 16-lane order whatever the
// register width. So avx2, avx512, neon and sve give identical results; the generic (plain C++)
// path differs from them by rounding only (no fused multiply-add, libm's exp).
//
// Compiled with -ffp-contract=off (CMakeLists.txt): the only fused multiply-adds are the explicit
// MulAdd calls, so the compiler cannot fuse a product and a sum on one target and not another
// (it did, for the softmax denominator, between NEON and SVE).
//
// Any head size: keys are vectorised along the block and the head dims along the row, with the
// last, partial vector of each loaded and stored under a mask (or through a small buffer where a
// full-width access could leave the caller's arrays), outside the hot loop where it can be.
#include "base/simd_targets.h"  // the targets compiled; M3_HWY_TABLE_OF
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_kernels_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <math.h>

#include <cstddef>
#include <cstdint>

#include "attention/attention_kernels_impl.h"
#include "m3/dtype.h"

HWY_BEFORE_NAMESPACE();
// The emulated 128-bit target Highway always compiles is not used: the generic path is plain C++.
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes (a wider SVE machine runs 16-lane vectors), so the fixed 16-lane sum order
// below covers every width: 4, 8 or 16 lanes.
constexpr int kMaxLanes = 16;
using DF = hn::CappedTag<float, kMaxLanes>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DH = hn::Rebind<uint16_t, DF>;  // bf16 bits, as many lanes as DF
using D8 = hn::Rebind<uint8_t, DF>;   // E4M3 bytes and UE8M0 scales
using DF16 = hn::Rebind<hwy::float16_t, DF>;
using VF = hn::Vec<DF>;

// Accumulators a tile may keep in registers: AVX2 has 16 vector registers, the other targets 32.
// On AVX2 a q·k tile keeps 12 (6 queries x 2 key vectors, the keys and the broadcast take the
// other 4): with 8, each chain's fused multiply-add came round every 4 cycles, its latency, so
// the loop had no slack (docs/BENCHMARKS.md §0l). A P·V tile keeps 8 (H x V with V dividing the
// usual head sizes' vectors).
#if HWY_TARGET == HWY_AVX2
constexpr int kMaxAcc = 8;
constexpr int kQkAcc = 12;
#else
constexpr int kMaxAcc = 16;
constexpr int kQkAcc = 16;
#endif

#if HWY_TARGET == HWY_AVX2
constexpr const char* kName = "avx2";
#elif HWY_TARGET == HWY_AVX3
constexpr const char* kName = "avx512";
#elif HWY_TARGET == HWY_NEON
constexpr const char* kName = "neon";
#elif HWY_TARGET == HWY_SVE
constexpr const char* kName = "sve";
#else
#error "attention kernels for a target without a CpuPath"
#endif

constexpr int Min(int a, int b) { return a < b ? a : b; }
HWY_INLINE float MaxF(float a, float b) { return a > b ? a : b; }

// N K/V elements as fp32: fp32 as is, bf16 widened exactly (its bits become the high half).
HWY_INLINE VF LoadWide(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadWide(DF df, const uint16_t* p) {
  const DH dh;
  const DU du;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(dh, p))));
}

// E4M3 (an fp8 cache) widened exactly to its value x 2^-8. Sign-extended to 16 bits and shifted up
// by 7, a byte s.eeee.mmm puts its sign in bits 15 and 14 and eeee.mmm in bits 13-7; clearing bit
// 14 leaves the F16 s.0eeee.mmm0000000, which is value x 2^-8, subnormals included (the MXFP8
// weights' widening, docs/FORMATS.md). The 2^8 goes into the key's (value row's) scale, which
// multiplies after the dot product: for powers of two the same bits. 0x7f/0xff (NaN) are never
// stored.
HWY_INLINE VF LoadWide(DF df, const uint8_t* p) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int16_t, DF> d16;
  const auto h = hn::And(hn::ShiftLeft<7>(hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)))),
                         hn::Set(d16, int16_t(0xbf80 - 0x10000)));
  return hn::PromoteTo(df, hn::BitCast(DF16(), h));
}

// 2^8 x the UE8M0 scales of keys [t, t + N): 2^(s + 8 - 127) (a cache's s is at most 246, so this
// stays finite); lanes at or past len read 1 (their scores are dropped).
HWY_INLINE VF LoadScales(DF df, const uint8_t* scales, int t, int len) {
  const D8 d8;
  const DU du;
  const int N = int(hn::Lanes(df));
  const uint8_t* p = scales + t;
  alignas(64) uint8_t buf[kMaxLanes];
  if (t + N > len) {
    for (int i = 0; i < N; ++i) buf[i] = t + i < len ? scales[t + i] : uint8_t(119);
    p = buf;
  }
  const auto s = hn::Add(hn::PromoteTo(du, hn::LoadU(d8, p)), hn::Set(du, 8u));
  return hn::BitCast(df, hn::ShiftLeft<23>(s));
}

// One E4M3 code as value x 2^-8, the same as LoadWide's lanes.
HWY_INLINE float WidenOne(float x) { return x; }
HWY_INLINE float WidenOne(uint8_t b) { return f8e4m3_to_f32(b) * 0x1p-8f; }
HWY_INLINE float WidenOne(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// The first n (< Lanes) elements of p, the other lanes 0, reading p[0, n) only.
template <typename T>
HWY_INLINE VF LoadFirst(DF df, const T* p, int n) {
  alignas(64) T buf[kMaxLanes] = {};
  for (int i = 0; i < n; ++i) buf[i] = p[i];
  return LoadWide(df, buf);
}

// The first n (<= Lanes) elements of p, the other lanes 0, reading p[0, n) only.
template <typename T>
HWY_INLINE VF LoadPart(DF df, const T* p, int n) {
  if (n >= int(hn::Lanes(df))) return LoadWide(df, p);
  if (n <= 0) return hn::Zero(df);
  return LoadFirst(df, p, n);
}

// Writes the first n (< Lanes) lanes of v to p[0, n).
HWY_INLINE void StoreFirst(DF df, VF v, float* p, int n) {
  alignas(64) float buf[kMaxLanes];
  hn::Store(v, df, buf);
  for (int i = 0; i < n; ++i) p[i] = buf[i];
}

// Requests a region into L2 spread over a loop: Step() asks for the next per_step cache lines.
struct Prefetch {
  const char* p = nullptr;
  const char* end = nullptr;
  int per_step = 0;
  Prefetch(const void* region, size_t bytes, int64_t steps) {
    if (region == nullptr || bytes == 0 || steps <= 0) return;
    p = static_cast<const char*>(region);
    end = p + bytes;
    const int64_t lines = int64_t((bytes + 63) / 64);
    per_step = int((lines + steps - 1) / steps);
  }
  HWY_INLINE void Step() {
    for (int i = 0; i < per_step && p < end; ++i, p += 64) __builtin_prefetch(p, 0, 2);
  }
};

// exp(x) for x <= 0 (softmax weights): 2^(x·log2e) by range reduction, degree-6 polynomial for
// 2^f on [-0.5, 0.5]; relative error ~2e-7. x is clamped at -87 so that 2^n stays a normal
// number: weights below e^-87 (1e-38, which no sum next to the maximum's weight of 1 can see)
// come out as about 1e-38 instead of 0.
HWY_INLINE VF Exp(DF df, VF x) {
  const DI di;
  x = hn::Max(x, hn::Set(df, -87.0f));
  const VF t = hn::Mul(x, hn::Set(df, 1.44269504088896341f));
  const VF n = hn::Round(t);
  const VF f = hn::Sub(t, n);
  VF p = hn::Set(df, 1.5403530393381606e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.3333558146428443e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.6181291076284772e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.5504108664821580e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 2.4022650695910071e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.9314718055994531e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  const VF scale = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::Mul(p, scale);
}

// ------------------------------------------------------------------ q·k scores
// A tile is Q queries × V key vectors (V <= 4, Q·V <= kQkAcc <= 16) of named accumulators
// acc0..acc15, accumulator k for query k / V and key vector k % V; the unused ones compile away
// (SVE vectors cannot live in arrays). Few keys per block (small blocks) get tall tiles, so that
// every tile keeps kQkAcc independent FMA chains.

#define M3_ACC16(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
#define M3_ZERO(k) VF acc##k = hn::Zero(df);

// The j-th of four vectors, chosen at compile time.
template <int j>
HWY_INLINE VF Pick(VF v0, VF v1, VF v2, VF v3) {
  if constexpr (j == 0) return v0;
  else if constexpr (j == 1) return v1;
  else if constexpr (j == 2) return v2;
  else return v3;
}

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
    acc##k = hn::MulAdd(hn::Set(df, q[int64_t(k / V) * dim + d]), Pick<k % V>(k0, k1, k2, k3), acc##k);
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
  auto from = [&](int t0) { return KeyVectors<T>{{kT + t0, kT + t0 + N, kT + t0 + 2 * N, kT + t0 + 3 * N}}; };
  int t0 = 0;
  for (; t0 + V * N <= n_keys; t0 += V * N) {
    sink.t0 = t0;
    QkTile<Q, V, false>(q, dim, from(t0), kt_stride, V * N, sink, pf);
  }
  if (t0 == n_keys) return;
  sink.t0 = t0;
  if (t0 + V * N <= kt_stride) return QkTile<Q, V, true>(q, dim, from(t0), kt_stride, n_keys - t0, sink, pf);
  // A block narrower than the tile: single vectors, the last one scalar if it would leave the row.
  for (; t0 + N <= n_keys; t0 += N) {
    sink.t0 = t0;
    QkTile<Q, 1, false>(q, dim, from(t0), kt_stride, N, sink, pf);
  }
  if (t0 == n_keys) return;
  sink.t0 = t0;
  if (t0 + N <= kt_stride) QkTile<Q, 1, true>(q, dim, from(t0), kt_stride, n_keys - t0, sink, pf);
  else QkScalar<Q>(q, dim, kT, kt_stride, t0, n_keys, sink);
}

// Q queries against a step's blocks side by side, each block's K page in its own place: pages[p]
// ([dim][B]) holds keys [p·B, (p + 1)·B) of the step, all B valid but in the last page. Needs B to
// be a multiple of the vector width, so that no vector spans two pages. Tiles of V vectors as
// QkKeys, the last one masked; the same bits as the keys in one block.
template <int Q, int V, typename T, class Sink>
HWY_INLINE void QkPagedKeys(const float* q, int dim, const T* const* pages, int B, int n_keys, Sink& sink,
                            Prefetch& pf) {
  const int N = int(hn::Lanes(DF()));
  const int per_page = B / N, vecs = (n_keys + N - 1) / N;
  auto vec = [&](int jv) { return pages[jv / per_page] + (jv % per_page) * N; };
  auto from = [&](int jv) {  // past the last vector: the last (masked out)
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
  QkTile<Q, V, true>(q, dim, from(jv), B, n_keys - jv * N, sink, pf);
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
// 4, 2 and 1 (those below Q).
template <int Q, int V, class Keys, class Sink>
HWY_INLINE void QkRows(const float* q, int nq, int dim, const Keys& keys, Sink& sink, Prefetch& pf) {
  int i0 = 0;
  auto rows = [&](auto height) {
    constexpr int R = decltype(height)::kRows;
    for (; i0 + R <= nq; i0 += R) {
      sink.i0 = i0;
      keys.template Run<R, V>(q + int64_t(i0) * dim, dim, sink, pf);
    }
  };
  if constexpr (Q != 16 && Q != 8 && Q != 4 && Q != 2 && Q != 1) rows(TileRows<Q>{});
  if constexpr (Q >= 16) rows(TileRows<16>{});
  if constexpr (Q >= 8) rows(TileRows<8>{});
  if constexpr (Q >= 4) rows(TileRows<4>{});
  if constexpr (Q >= 2) rows(TileRows<2>{});
  rows(TileRows<1>{});
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

// Stores score vectors to S rows (stride ld), the last one cut at n_keys. With scales (an fp8
// cache) each key's score is multiplied by its power-of-two scale first: q·(k x 2^e) exactly.
struct ScoreStore {
  float* S;
  int ld, n_keys, i0 = 0, t0 = 0;
  const uint8_t* scales = nullptr;
  int scale_len = 0;
  const uint8_t* const* page_scales = nullptr;  // a step's pages (QkPagedKeys): page p's scales
  int page_keys = 0;                            // B, a multiple of the vector width
  HWY_INLINE void one(DF df, float* row, int t, VF v) const {
    const int N = int(hn::Lanes(df));
    if (t >= n_keys) return;
    if (scales != nullptr) v = hn::Mul(v, LoadScales(df, scales, t, scale_len));
    if (page_scales != nullptr)
      v = hn::Mul(v, LoadScales(df, page_scales[t / page_keys], t % page_keys, page_keys));
    if (t + N <= n_keys) hn::StoreU(v, df, row + t);
    else StoreFirst(df, v, row + t, n_keys - t);
  }
  // Query i0 + i's first nv vectors from key t0.
  HWY_INLINE void operator()(int i, int nv, VF v0, VF v1, VF v2, VF v3) const {
    const DF df;
    const int N = int(hn::Lanes(df));
    float* row = S + int64_t(i0 + i) * ld;
    one(df, row, t0, v0);
    if (nv > 1) one(df, row, t0 + N, v1);
    if (nv > 2) one(df, row, t0 + 2 * N, v2);
    if (nv > 3) one(df, row, t0 + 3 * N, v3);
  }
};

// Folds score vectors into each query's running maximum (lanes past n_keys do not count). With
// pages (page_keys = B > 0, a step of whole pages of B keys, B a multiple of the vector width) a
// maximum per page, best[p·page_stride + i]. One sink type for both, so that the q·k tiles are
// compiled once for block maxima (build time: this file is the slowest to compile under ASan).
struct MaxFold {
  float* best;
  int n_keys, i0 = 0, t0 = 0;
  const uint8_t* scales = nullptr;  // as for ScoreStore
  int scale_len = 0;
  int page_keys = 0, page_stride = 0;
  const uint8_t* const* page_scales = nullptr;  // fp8 pages: page p's key scales
  HWY_INLINE VF valid(DF df, int t, VF v) const {
    const int N = int(hn::Lanes(df));
    const VF lowest = hn::Set(df, -HUGE_VALF);
    if (t >= n_keys) return lowest;
    if (scales != nullptr) v = hn::Mul(v, LoadScales(df, scales, t, scale_len));
    if (t + N <= n_keys) return v;
    return hn::IfThenElse(hn::FirstN(df, size_t(n_keys - t)), v, lowest);
  }
  HWY_INLINE void page_max(DF df, int i, int t, VF v) const {
    if (t >= n_keys) return;
    const int p = t / page_keys;
    if (page_scales != nullptr) v = hn::Mul(v, LoadScales(df, page_scales[p], t % page_keys, page_keys));
    float& b = best[int64_t(p) * page_stride + i0 + i];
    b = MaxF(b, hn::GetLane(hn::MaxOfLanes(df, v)));
  }
  HWY_INLINE void operator()(int i, int nv, VF v0, VF v1, VF v2, VF v3) const {
    const DF df;
    const int N = int(hn::Lanes(df));
    if (page_keys > 0) {
      page_max(df, i, t0, v0);
      if (nv > 1) page_max(df, i, t0 + N, v1);
      if (nv > 2) page_max(df, i, t0 + 2 * N, v2);
      if (nv > 3) page_max(df, i, t0 + 3 * N, v3);
      return;
    }
    VF m = valid(df, t0, v0);
    if (nv > 1) m = hn::Max(m, valid(df, t0 + N, v1));
    if (nv > 2) m = hn::Max(m, valid(df, t0 + 2 * N, v2));
    if (nv > 3) m = hn::Max(m, valid(df, t0 + 3 * N, v3));
    best[i0 + i] = MaxF(best[i0 + i], hn::GetLane(hn::MaxOfLanes(df, m)));
  }
};

template <typename T>
void QkScores(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* S, int ld,
              const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, QkSteps(nq, dim, n_keys));
  ScoreStore store{S, ld, n_keys};
  QkForTiles(q, nq, dim, BlockKeys<T>{kT, kt_stride, n_keys}, store, pf);
}

template <typename T>
void QkBlockMax(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out,
                const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, QkSteps(nq, dim, n_keys));
  for (int i = 0; i < nq; ++i) out[i] = -HUGE_VALF;
  MaxFold fold{out, n_keys};
  QkForTiles(q, nq, dim, BlockKeys<T>{kT, kt_stride, n_keys}, fold, pf);
}

// An fp8 cache: E4M3 keys with one scale per key (its column of kT).
void QkScoresFp8(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride, int n_keys,
                 float* S, int ld, const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, QkSteps(nq, dim, n_keys));
  ScoreStore store{S, ld, n_keys};
  store.scales = scales;
  store.scale_len = kt_stride;
  QkForTiles(q, nq, dim, BlockKeys<uint8_t>{kT, kt_stride, n_keys}, store, pf);
}

void QkBlockMaxFp8(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride,
                   int n_keys, float* out, const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, QkSteps(nq, dim, n_keys));
  for (int i = 0; i < nq; ++i) out[i] = -HUGE_VALF;
  MaxFold fold{out, n_keys};
  fold.scales = scales;
  fold.scale_len = kt_stride;
  QkForTiles(q, nq, dim, BlockKeys<uint8_t>{kT, kt_stride, n_keys}, fold, pf);
}

// Block maxima of n_pages whole pages at once (the index branch): out[p·out_stride + i]. With pages
// of one vector (AVX-512 and 16-key blocks) a tile of 4 queries x 4 pages broadcasts each query
// element once per 4 multiply-adds, where a block alone took tiles of 16 queries x 1 vector, one
// broadcast per multiply-add (docs/BENCHMARKS.md §0t).
// Pages taken one at a time (each call prefetching the next page), as qk_block_max on each: where
// a page already fills a tile's width (AVX2: 16 keys are its 2 vectors), or is not whole vectors.
HWY_INLINE bool BlockMaxPerPage(int B) {
  const int N = int(hn::Lanes(DF()));
  return B % N != 0 || B / N >= kWide;
}

template <typename T>
void QkBlockMaxPaged(const float* q, int nq, int dim, const T* const* pages, int n_pages, int B, float* out,
                     int out_stride) {
  Prefetch pf(nullptr, 0, 0);
  if (BlockMaxPerPage(B)) {
    const size_t bytes = size_t(dim) * B * sizeof(T);
    for (int p = 0; p < n_pages; ++p)
      QkBlockMax<T>(q, nq, dim, pages[p], B, B, out + int64_t(p) * out_stride, p + 1 < n_pages ? pages[p + 1] : nullptr,
                    p + 1 < n_pages ? bytes : 0);
    return;
  }
  for (int p = 0; p < n_pages; ++p)
    for (int i = 0; i < nq; ++i) out[int64_t(p) * out_stride + i] = -HUGE_VALF;
  MaxFold fold{out, n_pages * B};
  fold.page_keys = B;
  fold.page_stride = out_stride;
  QkForTiles(q, nq, dim, PagedKeys<T>{pages, B, n_pages * B}, fold, pf);
}

void QkBlockMaxPagedFp8(const float* q, int nq, int dim, const uint8_t* const* pages, const uint8_t* const* scales,
                        int n_pages, int B, float* out, int out_stride) {
  Prefetch pf(nullptr, 0, 0);
  if (BlockMaxPerPage(B)) {
    const size_t bytes = size_t(dim) * B;
    for (int p = 0; p < n_pages; ++p)
      QkBlockMaxFp8(q, nq, dim, pages[p], scales[p], B, B, out + int64_t(p) * out_stride,
                    p + 1 < n_pages ? pages[p + 1] : nullptr, p + 1 < n_pages ? bytes : 0);
    return;
  }
  for (int p = 0; p < n_pages; ++p)
    for (int i = 0; i < nq; ++i) out[int64_t(p) * out_stride + i] = -HUGE_VALF;
  MaxFold fold{out, n_pages * B};
  fold.page_keys = B;
  fold.page_stride = out_stride;
  fold.page_scales = scales;
  QkForTiles(q, nq, dim, PagedKeys<uint8_t>{pages, B, n_pages * B}, fold, pf);
}

// A step's pages ([dim][B] each, QkPagedKeys): with B not a multiple of the vector width, a call
// per page into its columns of S, the same bits.
template <typename T>
void QkScoresPaged(const float* q, int nq, int dim, const T* const* pages, int B, int n_keys, float* S, int ld) {
  Prefetch pf(nullptr, 0, 0);
  if (B % int(hn::Lanes(DF())) != 0) {
    for (int p = 0; p * B < n_keys; ++p) QkScores<T>(q, nq, dim, pages[p], B, Min(B, n_keys - p * B), S + p * B, ld, nullptr, 0);
    return;
  }
  ScoreStore store{S, ld, n_keys};
  QkForTiles(q, nq, dim, PagedKeys<T>{pages, B, n_keys}, store, pf);
}

void QkScoresPagedFp8(const float* q, int nq, int dim, const uint8_t* const* pages, const uint8_t* const* scales, int B,
                      int n_keys, float* S, int ld) {
  Prefetch pf(nullptr, 0, 0);
  if (B % int(hn::Lanes(DF())) != 0) {
    for (int p = 0; p * B < n_keys; ++p)
      QkScoresFp8(q, nq, dim, pages[p], scales[p], B, Min(B, n_keys - p * B), S + p * B, ld, nullptr, 0);
    return;
  }
  ScoreStore store{S, ld, n_keys};
  store.page_scales = scales;
  store.page_keys = B;
  QkForTiles(q, nq, dim, PagedKeys<uint8_t>{pages, B, n_keys}, store, pf);
}

// An fp8 cache's P·V: each value row's scale (x 2^8, see LoadWide) goes into its column of P, then
// the rows are widened as value x 2^-8: p x 2^(e+8) x v 2^-8 = p x (v x 2^e) exactly.
template <typename T>
void PvAccumulate(const float* P, int heads, int ld, int n_keys, const T* v, int hd, float* o, const void* pf_region,
                  size_t pf_bytes);
template <typename T>
void PvAccumulatePaged(const float* P, int heads, int ld, int n_keys, const T* const* pages, int B, int hd, float* o);

// P with each column t multiplied by 2^8 x value row t's scale (the row's page scales[t / B]), in
// a per-thread scratch (heads, n_keys) that only grows (no std:: container: see the top of this
// file).
float* ScaledWeights(const float* P, int heads, int ld, int n_keys, const uint8_t* const* scales, int B) {
  struct Scratch {
    float* p = nullptr;
    size_t cap = 0;
    ~Scratch() { delete[] p; }
  };
  thread_local Scratch scratch;
  const size_t need = size_t(heads) * size_t(n_keys > 0 ? n_keys : 1);
  if (scratch.cap < need) {
    delete[] scratch.p;
    scratch.p = new float[need];
    scratch.cap = need;
  }
  float* buf = scratch.p;
  for (int t0 = 0, p = 0; t0 < n_keys; t0 += B, ++p) {
    const int rows = Min(B, n_keys - t0);
    for (int t = t0; t < t0 + rows; ++t) {
      uint32_t bits = uint32_t(scales[p][t - t0] + 8) << 23;
      float f;
      __builtin_memcpy(&f, &bits, sizeof f);
      for (int h = 0; h < heads; ++h) buf[size_t(h) * n_keys + t] = P[int64_t(h) * ld + t] * f;
    }
  }
  return buf;
}

void PvAccumulateFp8(const float* P, int heads, int ld, int n_keys, const uint8_t* v, const uint8_t* scales, int hd,
                     float* o, const void* pf_region, size_t pf_bytes) {
  const float* buf = ScaledWeights(P, heads, ld, n_keys, &scales, n_keys);
  PvAccumulate<uint8_t>(buf, heads, n_keys, n_keys, v, hd, o, pf_region, pf_bytes);
}

void PvAccumulatePagedFp8(const float* P, int heads, int ld, int n_keys, const uint8_t* const* pages,
                          const uint8_t* const* scales, int B, int hd, float* o) {
  const float* buf = ScaledWeights(P, heads, ld, n_keys, scales, B);
  PvAccumulatePaged<uint8_t>(buf, heads, n_keys, n_keys, pages, B, hd, o);
}

// ------------------------------------------------------------------ online softmax

// p = exp(s[t, t + n) - max) stored back; returns p with the lanes past n zero. n may be <= 0.
// `room`: floats writable and readable from s (the row stride left).
HWY_INLINE VF ExpStore(DF df, float* s, int n, int room, VF vmax) {
  const int N = int(hn::Lanes(df));
  if (n >= N) {
    const VF p = Exp(df, hn::Sub(hn::LoadU(df, s), vmax));
    hn::StoreU(p, df, s);
    return p;
  }
  if (n <= 0) return hn::Zero(df);
  const auto m = hn::FirstN(df, size_t(n));
  const VF x = room >= N ? hn::LoadU(df, s) : LoadFirst(df, s, n);
  const VF p = hn::IfThenElseZero(m, Exp(df, hn::Sub(x, vmax)));
  StoreFirst(df, p, s, n);
  return p;
}

// lanes[0] + ... + lanes[15] as the tree (i, i + 8), then (i, i + 4), (i, i + 2), (i, i + 1): two
// 4-lane vector adds and three scalar ones, the same on every target.
HWY_INLINE float SumOf16Lanes(const float* lanes) {
  const hn::FixedTag<float, 4> d4;
  const auto a0 = hn::Add(hn::Load(d4, lanes), hn::Load(d4, lanes + 8));
  const auto a1 = hn::Add(hn::Load(d4, lanes + 4), hn::Load(d4, lanes + 12));
  alignas(16) float b[4];
  hn::Store(hn::Add(a0, a1), d4, b);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

void SoftmaxBlockUpdate(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int hd) {
  const DF df;
  const int N = int(hn::Lanes(df));
  const VF lowest = hn::Set(df, -HUGE_VALF);
  for (int h = 0; h < heads; ++h) {
    float* s = S + int64_t(h) * ld;
    VF vmax = hn::Set(df, m[h]);
    int t = 0;
    for (; t + N <= n_keys; t += N) vmax = hn::Max(vmax, hn::LoadU(df, s + t));
    if (t < n_keys) {
      const int n = n_keys - t;
      const VF x = ld - t >= N ? hn::LoadU(df, s + t) : LoadFirst(df, s + t, n);
      vmax = hn::Max(vmax, hn::IfThenElse(hn::FirstN(df, size_t(n)), x, lowest));
    }
    const float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
    // The same polynomial as the weights (no libm call per head and block); m = -inf on the first
    // block gives e^-87, against l = 0 and o = 0, and an unchanged maximum gives exactly 1.
    const float corr = mx == m[h] ? 1.0f : hn::GetLane(Exp(df, hn::Set(df, m[h] - mx)));  // Exp(0) is exactly 1
    const VF vm = hn::Set(df, mx);
    // The sum in 16 fixed lanes (key t adds to lane t % 16) whatever N is (4, 8 or 16), reduced
    // in a fixed order: the same bits on every vector width.
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df), acc2 = hn::Zero(df), acc3 = hn::Zero(df);
    for (t = 0; t < n_keys; t += kMaxLanes) {
      acc0 = hn::Add(acc0, ExpStore(df, s + t, n_keys - t, ld - t, vm));
      if (N <= 8) acc1 = hn::Add(acc1, ExpStore(df, s + t + N, n_keys - t - N, ld - t - N, vm));
      if (N <= 4) {
        acc2 = hn::Add(acc2, ExpStore(df, s + t + 2 * N, n_keys - t - 2 * N, ld - t - 2 * N, vm));
        acc3 = hn::Add(acc3, ExpStore(df, s + t + 3 * N, n_keys - t - 3 * N, ld - t - 3 * N, vm));
      }
    }
    alignas(64) float lanes[kMaxLanes];
    hn::Store(acc0, df, lanes);
    if (N <= 8) hn::Store(acc1, df, lanes + N);
    if (N <= 4) {
      hn::Store(acc2, df, lanes + 2 * N);
      hn::Store(acc3, df, lanes + 3 * N);
    }
    l[h] = l[h] * corr + SumOf16Lanes(lanes);
    m[h] = mx;
    if (corr == 1.0f) continue;  // o * 1 is o
    const VF vc = hn::Set(df, corr);
    float* oh = o + int64_t(h) * hd;
    int d = 0;
    for (; d + N <= hd; d += N) hn::StoreU(hn::Mul(hn::LoadU(df, oh + d), vc), df, oh + d);
    if (d < hd) StoreFirst(df, hn::Mul(LoadFirst(df, oh + d, hd - d), vc), oh + d, hd - d);
  }
}

// ------------------------------------------------------------------ P·V
// The value rows of a call: row t at at[t / B] + (t % B)·hd, pages of B rows (one block: one page
// of n_keys rows; a step of several blocks: each block's V page in its own place).
template <typename T>
struct ValuePages {
  const T* const* at;
  int B;
};

// A tile is H heads (H <= 6) × V vectors of head dims from d0 (V <= 4, H·V <= 16).

// o[h][d0, d0 + V·N) += Σ_t P[h][t] · v[t][d0, ...), `avail` of those dims valid (kTail: fewer than
// V·N). v rows are hd apart, so a full-width load of a partial vector reads into the next rows;
// where that would leave v's n_keys rows, and for the output, partial vectors go through buffers.
template <int H, int V, bool kTail, typename T>
HWY_NOINLINE void PvTile(DF df, const float* P, int ld, int n_keys, const ValuePages<T>& v, int hd, int d0, int avail,
                         float* o, Prefetch& pf) {
  const int N = int(hn::Lanes(df));
  auto part = [&](int j) HWY_ATTR { return !kTail || avail >= (j + 1) * N ? N : avail - j * N; };
#define M3_LOAD_O(k)                                                                                     \
  VF acc##k = hn::Zero(df);                                                                                \
  if constexpr (k < H * V) {                                                                               \
    const float* op = o + int64_t(k / V) * hd + d0 + (k % V) * N;                                          \
    acc##k = part(k % V) == N ? hn::LoadU(df, op) : LoadFirst(df, op, part(k % V));                        \
  }
  M3_ACC16(M3_LOAD_O)
#undef M3_LOAD_O
  // Row t of the step, at vt, with its weights in column t of P.
  auto step = [&](int t, const T* vt, auto load) HWY_ATTR {
    pf.Step();
    const VF v0 = load(vt, 0);
    const VF v1 = V > 1 ? load(vt, 1) : v0;
    const VF v2 = V > 2 ? load(vt, 2) : v0;
    const VF v3 = V > 3 ? load(vt, 3) : v0;
#define M3_PV_FMA(k) \
  if constexpr (k < H * V) acc##k = hn::MulAdd(hn::Set(df, P[int64_t(k / V) * ld + t]), Pick<k % V>(v0, v1, v2, v3), acc##k);
    M3_ACC16(M3_PV_FMA)
#undef M3_PV_FMA
  };
  auto full = [&](const T* p, int j) HWY_ATTR { return LoadWide(df, p + j * N); };
  auto partial = [&](const T* p, int j) HWY_ATTR {
    return part(j) == N ? LoadWide(df, p + j * N) : LoadFirst(df, p + j * N, part(j));
  };
  for (int p = 0, t0 = 0; t0 < n_keys; ++p, t0 += v.B) {
    const T* page = v.at[p] + d0;
    const int rows = Min(v.B, n_keys - t0);
    // kTail: the rows whose full-width loads stay inside the page's rows load full width (the
    // lanes past avail are never stored); the last ones, whose loads would leave it, go through
    // buffers.
    int full_rows = rows;
    if (kTail) {
      const int64_t limit = int64_t(rows) * hd - d0 - int64_t(V) * N;  // full width is safe for t·hd <= limit
      full_rows = limit < 0 ? 0 : int(limit / hd + 1 < rows ? limit / hd + 1 : rows);
    }
    for (int t = 0; t < full_rows; ++t) step(t0 + t, page + int64_t(t) * hd, full);
    for (int t = full_rows; t < rows; ++t) step(t0 + t, page + int64_t(t) * hd, partial);
  }
#define M3_STORE_O(k)                                                 \
  if constexpr (k < H * V) {                                          \
    float* op = o + int64_t(k / V) * hd + d0 + (k % V) * N;           \
    if (part(k % V) == N) hn::StoreU(acc##k, df, op);                 \
    else StoreFirst(df, acc##k, op, part(k % V));                     \
  }
  M3_ACC16(M3_STORE_O)
#undef M3_STORE_O
}

// H heads × all head dims: tiles of V vectors, then one tail tile of what is left.
template <int H, int V, typename T>
HWY_INLINE void PvHeads(DF df, const float* P, int ld, int n_keys, const ValuePages<T>& v, int hd, float* o,
                        Prefetch& pf) {
  const int N = int(hn::Lanes(df));
  int d0 = 0;
  for (; d0 + V * N <= hd; d0 += V * N) PvTile<H, V, false>(df, P, ld, n_keys, v, hd, d0, V * N, o, pf);
  const int left = hd - d0;
  if (left == 0) return;
  // A remainder of whole vectors needs no masks.
  const bool whole = left % N == 0;
  if (left > 3 * N && V > 3) {
    if (whole) PvTile<H, (V > 3 ? 4 : 1), false>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
    else PvTile<H, (V > 3 ? 4 : 1), true>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
  } else if (left > 2 * N && V > 2) {
    if (whole) PvTile<H, (V > 2 ? 3 : 1), false>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
    else PvTile<H, (V > 2 ? 3 : 1), true>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
  } else if (left > N && V > 1) {
    if (whole) PvTile<H, (V > 1 ? 2 : 1), false>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
    else PvTile<H, (V > 1 ? 2 : 1), true>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
  } else {
    if (whole) PvTile<H, 1, false>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
    else PvTile<H, 1, true>(df, P, ld, n_keys, v, hd, d0, left, o, pf);
  }
}

template <typename T>
void PvAccumulatePages(const float* P, int heads, int ld, int n_keys, const ValuePages<T>& v, int hd, float* o,
                       const void* pf_region, size_t pf_bytes) {
  const DF df;
  const int N = int(hn::Lanes(df));
  constexpr int V4 = kMaxAcc / 4, V3 = Min(4, kMaxAcc / 3), V2 = Min(4, kMaxAcc / 2);
  // AVX2 first takes 6 heads at a time, 2 vectors each (12 accumulators, as its q·k tiles; 4 x 2
  // left no slack between a chain's fused multiply-adds), the other targets 4 x 4.
  constexpr int kTallH = kQkAcc > kMaxAcc ? kQkAcc / 2 : 4, kTallV = kTallH == 4 ? V4 : 2;
  // Steps at most (see QkSteps): n_keys per (head tile, dim tile).
  Prefetch pf(pf_region, pf_bytes,
              int64_t(n_keys) * (heads > kTallH ? heads / kTallH : 1) * (hd > kTallV * N ? hd / (kTallV * N) : 1));
  int h = 0;
  for (; h + kTallH <= heads; h += kTallH)
    PvHeads<kTallH, kTallV>(df, P + int64_t(h) * ld, ld, n_keys, v, hd, o + int64_t(h) * hd, pf);
  for (; h + 4 <= heads; h += 4) PvHeads<4, V4>(df, P + int64_t(h) * ld, ld, n_keys, v, hd, o + int64_t(h) * hd, pf);
  const float* Ph = P + int64_t(h) * ld;
  float* oh = o + int64_t(h) * hd;
  if (heads - h == 3) PvHeads<3, V3>(df, Ph, ld, n_keys, v, hd, oh, pf);
  else if (heads - h == 2) PvHeads<2, V2>(df, Ph, ld, n_keys, v, hd, oh, pf);
  else if (heads - h == 1) PvHeads<1, 4>(df, Ph, ld, n_keys, v, hd, oh, pf);
}

template <typename T>
void PvAccumulate(const float* P, int heads, int ld, int n_keys, const T* v, int hd, float* o, const void* pf_region,
                  size_t pf_bytes) {
  const T* one[1] = {v};
  PvAccumulatePages(P, heads, ld, n_keys, ValuePages<T>{one, n_keys}, hd, o, pf_region, pf_bytes);
}

template <typename T>
void PvAccumulatePaged(const float* P, int heads, int ld, int n_keys, const T* const* pages, int B, int hd, float* o) {
  PvAccumulatePages(P, heads, ld, n_keys, ValuePages<T>{pages, B}, hd, o, nullptr, 0);
}

#undef M3_ZERO
#undef M3_ACC16

}  // namespace

const AttentionKernels kAttentionKernels{kName,
                                         &QkScores<float>,
                                         &QkScores<uint16_t>,
                                         &QkBlockMax<float>,
                                         &QkBlockMax<uint16_t>,
                                         &SoftmaxBlockUpdate,
                                         &PvAccumulate<float>,
                                         &PvAccumulate<uint16_t>,
                                         &QkScoresFp8,
                                         &QkBlockMaxFp8,
                                         &PvAccumulateFp8,
                                         &QkScoresPaged<float>,
                                         &QkScoresPaged<uint16_t>,
                                         &QkScoresPagedFp8,
                                         &PvAccumulatePaged<float>,
                                         &PvAccumulatePaged<uint16_t>,
                                         &PvAccumulatePagedFp8,
                                         &QkBlockMaxPaged<float>,
                                         &QkBlockMaxPaged<uint16_t>,
                                         &QkBlockMaxPagedFp8};

}  // namespace HWY_NAMESPACE
}  // namespace m3
#endif  // HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace m3 {

const AttentionKernels* simd_attention_kernels(CpuPath path) {
  return M3_HWY_TABLE_OF(AttentionKernels, kAttentionKernels, path);
}

}  // namespace m3
#endif  // HWY_ONCE
