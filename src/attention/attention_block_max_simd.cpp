// The index branch's block maxima from one Highway source: each query's largest score in a block,
// or in each of several pages at once (the tiles: attention_qk_tiles-inl.h; the tables:
// attention_kernels_simd.cpp).
#include "base/simd_targets.h"  // the targets compiled
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_block_max_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/attention_qk_tiles-inl.h"
#include "attention/attention_simd-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace HWY_NAMESPACE {
namespace {

// Folds score vectors into each query's running maximum (lanes past n_keys do not count). With
// pages (page_keys = B > 0, a step of whole pages of B keys, B a multiple of the vector width) a
// maximum per page, best[p·page_stride + i]. One sink type for both, so that the q·k tiles are
// compiled once for block maxima (build time).
struct MaxFold {
  float* best;
  int n_keys, i0 = 0, t0 = 0;
  const uint8_t* scales = nullptr;  // an fp8 cache: each key's scale multiplies its score
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
    // Whole pages of whole vectors (BlockMaxOfPages): every lane of v is a key of page p.
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

}  // namespace

template <typename T>
void QkBlockMax(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out,
                const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, QkSteps(nq, dim, n_keys));
  for (int i = 0; i < nq; ++i) out[i] = -HUGE_VALF;
  MaxFold fold{out, n_keys};
  QkForTiles(q, nq, dim, BlockKeys<T>{kT, kt_stride, n_keys}, fold, pf);
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

namespace {

// Block maxima with the queries in the lanes, for a prefill chunk's index branch: 1,024 (the tiny
// preset) or 2,048 (M3) query vectors a call against up to 64 pages. A tile of Qv query vectors x
// Kt keys multiplies each key element, broadcast, into Qv vectors of queries, so a page's maximum is
// a lane-wise Max over its keys with no horizontal reduction per query, and every key element is
// widened once per call, where the key-lane tiles widened each page once per tile of queries and
// reduced each query's vectors across their lanes (docs/BENCHMARKS.md §0x). The same bits: each
// score is still one fused multiply-add chain over d in order from 0 (the multiply's operands
// swapped), scaled (fp8) by the same power of two after it.
#if HWY_TARGET == HWY_AVX2
constexpr int kLaneQv = 3;  // 3 x 4 accumulators, 3 query vectors and a broadcast: AVX2's 16 registers
#else
constexpr int kLaneQv = 4;
#endif
constexpr int kLaneKt = 4;

#define M3_ACC4(M) M(0) M(1) M(2) M(3)

// Folds the scores of Kt keys (kf[d·kstride + j], j < Kt) for Qv·N queries (dimension d of the
// queries at qT + d·Qv·N) into their running maxima best[0, Qv·N). scale: the keys' score scales
// (an fp8 cache) or nullptr.
template <int Qv, int Kt>
HWY_NOINLINE void LaneTile(const float* qT, int dim, const float* kf, int kstride, const float* scale, float* best) {
  static_assert(Qv >= 1 && Qv <= 4 && Kt >= 1 && Kt <= 4, "at most 4 x 4 accumulators");
  const DF df;
  const int N = int(hn::Lanes(df));
  M3_ACC16(M3_ZERO)
  // Accumulator k for query vector k / Kt and key k % Kt.
#define M3_LANE_FMA(k) \
  if constexpr (k < Qv * Kt && k % Kt == j) acc##k = MulAddBroadcast(Pick<k / Kt>(q0, q1, q2, q3), kd + j, acc##k);
#define M3_LANE_KEY(j_)                                            \
  if constexpr (j_ < Kt) {                                         \
    constexpr int j = j_;                                          \
    M3_ACC16(M3_LANE_FMA)                                          \
  }
  for (int d = 0; d < dim; ++d) {
    const float* qd = qT + int64_t(d) * Qv * N;
    const VF q0 = hn::LoadU(df, qd);
    const VF q1 = Qv > 1 ? hn::LoadU(df, qd + N) : q0;
    const VF q2 = Qv > 2 ? hn::LoadU(df, qd + 2 * N) : q0;
    const VF q3 = Qv > 3 ? hn::LoadU(df, qd + 3 * N) : q0;
    const float* kd = kf + int64_t(d) * kstride;
    M3_ACC4(M3_LANE_KEY)
  }
#undef M3_LANE_KEY
#undef M3_LANE_FMA
  if (scale != nullptr) {
#define M3_LANE_SCALE(k) \
  if constexpr (k < Qv * Kt) acc##k = hn::Mul(acc##k, hn::Set(df, scale[k % Kt]));
    M3_ACC16(M3_LANE_SCALE)
#undef M3_LANE_SCALE
  }
#define M3_ALL_ACC acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7, acc8, acc9, acc10, acc11, acc12, acc13, acc14, acc15
#define M3_LANE_KEY_MAX(j) \
  if constexpr (j > 0 && j < Kt) m = hn::Max(m, Pick16<i * Kt + j>(M3_ALL_ACC));
#define M3_LANE_ROW_MAX(i_)                                              \
  if constexpr (i_ < Qv) {                                               \
    constexpr int i = i_;                                                \
    VF m = Pick16<i * Kt>(M3_ALL_ACC);                                   \
    M3_LANE_KEY_MAX(1) M3_LANE_KEY_MAX(2) M3_LANE_KEY_MAX(3)             \
    hn::StoreU(hn::Max(hn::LoadU(df, best + i * N), m), df, best + i * N); \
  }
  M3_ACC4(M3_LANE_ROW_MAX)
#undef M3_LANE_ROW_MAX
#undef M3_LANE_KEY_MAX
#undef M3_ALL_ACC
}

// A page's B keys in tiles of kLaneKt, the last of B % kLaneKt.
template <int Qv>
void LaneTilesOfPage(const float* qT, int dim, const float* kf, int B, const float* scale, float* best) {
  int t = 0;
  for (; t + kLaneKt <= B; t += kLaneKt) LaneTile<Qv, kLaneKt>(qT, dim, kf + t, B, scale ? scale + t : nullptr, best);
  const float* s = scale ? scale + t : nullptr;
  switch (B - t) {
    case 3: LaneTile<Qv, 3>(qT, dim, kf + t, B, s, best); break;
    case 2: LaneTile<Qv, 2>(qT, dim, kf + t, B, s, best); break;
    case 1: LaneTile<Qv, 1>(qT, dim, kf + t, B, s, best); break;
    default: break;
  }
}

// n elements of src as fp32 (LoadWide's values).
template <typename T>
void WidenTo(const T* src, int64_t n, float* dst) {
  const DF df;
  const int N = int(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadWide(df, src + i), df, dst + i);
  for (; i < n; ++i) dst[i] = WidenOne(src[i]);
}

// Where the queries in the lanes are worth their transposition: a full vector of queries, and keys
// enough for the transposed queries to be reused.
HWY_INLINE bool QueriesInLanes(int nq, int n_pages, int B) {
  const int N = int(hn::Lanes(DF()));
  return nq >= N && int64_t(n_pages) * B >= 4 * N;
}

template <typename T>
void BlockMaxQueriesInLanes(const float* q, int nq, int dim, const T* const* pages, const uint8_t* const* scales,
                            int n_pages, int B, float* out, int out_stride) {
  const DF df;
  const int N = int(hn::Lanes(df));
  // The queries transposed once, a chunk of kLaneQv vectors at a time: chunk c (queries from
  // c·chunk) at qT + c·chunk·dim as [dim][width], width its queries rounded up to whole vectors,
  // the lanes past nq zero. Then a page at a time (a page of M3's, 128 keys x 128 dims, is 64 KiB
  // as fp32): its keys as fp32 (fp32 pages are read in place), an fp8 page's key scales as
  // LoadScales gives them (2^(s + 8 - 127)), and every chunk of queries against it.
  thread_local std::vector<float> qT, wide, key_scale, best;
  const int chunk = kLaneQv * N;
  const int chunks = (nq + chunk - 1) / chunk;
  qT.resize(size_t(chunks) * chunk * dim);
  for (int c = 0; c < chunks; ++c) {
    const int i0 = c * chunk, nqc = Min(chunk, nq - i0), width = (nqc + N - 1) / N * N;
    float* dst = qT.data() + size_t(i0) * dim;
    for (int i = 0; i < width; ++i)
      for (int d = 0; d < dim; ++d) dst[size_t(d) * width + i] = i < nqc ? q[int64_t(i0 + i) * dim + d] : 0.0f;
  }
  const int64_t page = int64_t(dim) * B;
  if constexpr (sizeof(T) != sizeof(float)) wide.resize(size_t(page));
  key_scale.resize(size_t(B));
  best.resize(size_t(chunk));
  for (int p = 0; p < n_pages; ++p) {
    const float* kf;
    if constexpr (sizeof(T) == sizeof(float)) {
      kf = pages[p];
    } else {
      WidenTo(pages[p], page, wide.data());
      kf = wide.data();
    }
    const float* s = nullptr;
    if (scales != nullptr) {
      for (int t = 0; t < B; ++t) {
        const uint32_t bits = (uint32_t(scales[p][t]) + 8u) << 23;
        __builtin_memcpy(&key_scale[size_t(t)], &bits, sizeof(float));
      }
      s = key_scale.data();
    }
    for (int c = 0; c < chunks; ++c) {
      const int i0 = c * chunk, nqc = Min(chunk, nq - i0), Qv = (nqc + N - 1) / N;
      const float* qc = qT.data() + size_t(i0) * dim;
      float* o = out + int64_t(p) * out_stride + i0;
      float* m = nqc == Qv * N ? o : best.data();  // whole vectors fold in place
      for (int i = 0; i < Qv * N; ++i) m[i] = -HUGE_VALF;
      switch (Qv) {
        case 1: LaneTilesOfPage<1>(qc, dim, kf, B, s, m); break;
        case 2: LaneTilesOfPage<2>(qc, dim, kf, B, s, m); break;
        case 3: LaneTilesOfPage<3>(qc, dim, kf, B, s, m); break;
        default:
          if constexpr (kLaneQv >= 4) LaneTilesOfPage<4>(qc, dim, kf, B, s, m);
          break;
      }
      if (m != o)
        for (int i = 0; i < nqc; ++i) o[i] = m[i];
    }
  }
}

// Both page types' QkBlockMaxPaged: T = uint8_t is an fp8 cache, with each page's key scales.
template <typename T>
void BlockMaxOfPages(const float* q, int nq, int dim, const T* const* pages, const uint8_t* const* scales, int n_pages,
                     int B, float* out, int out_stride) {
  if (QueriesInLanes(nq, n_pages, B)) return BlockMaxQueriesInLanes(q, nq, dim, pages, scales, n_pages, B, out, out_stride);
  Prefetch pf(nullptr, 0, 0);
  if (BlockMaxPerPage(B)) {
    const size_t bytes = size_t(dim) * B * sizeof(T);
    for (int p = 0; p < n_pages; ++p) {
      const T* next = p + 1 < n_pages ? pages[p + 1] : nullptr;
      float* o = out + int64_t(p) * out_stride;
      if constexpr (sizeof(T) == 1) QkBlockMaxFp8(q, nq, dim, pages[p], scales[p], B, B, o, next, next ? bytes : 0);
      else QkBlockMax<T>(q, nq, dim, pages[p], B, B, o, next, next ? bytes : 0);
    }
    return;
  }
  for (int p = 0; p < n_pages; ++p)
    for (int i = 0; i < nq; ++i) out[int64_t(p) * out_stride + i] = -HUGE_VALF;
  MaxFold fold{out, n_pages * B};
  fold.page_keys = B;
  fold.page_stride = out_stride;
  fold.page_scales = scales;
  QkForTiles(q, nq, dim, PagedKeys<T>{pages, B, n_pages * B}, fold, pf);
}

}  // namespace

template <typename T>
void QkBlockMaxPaged(const float* q, int nq, int dim, const T* const* pages, int n_pages, int B, float* out,
                     int out_stride) {
  BlockMaxOfPages(q, nq, dim, pages, nullptr, n_pages, B, out, out_stride);
}

void QkBlockMaxPagedFp8(const float* q, int nq, int dim, const uint8_t* const* pages, const uint8_t* const* scales,
                        int n_pages, int B, float* out, int out_stride) {
  BlockMaxOfPages(q, nq, dim, pages, scales, n_pages, B, out, out_stride);
}

template void QkBlockMax<float>(const float*, int, int, const float*, int, int, float*, const void*, size_t);
template void QkBlockMax<uint16_t>(const float*, int, int, const uint16_t*, int, int, float*, const void*, size_t);
template void QkBlockMaxPaged<float>(const float*, int, int, const float* const*, int, int, float*, int);
template void QkBlockMaxPaged<uint16_t>(const float*, int, int, const uint16_t* const*, int, int, float*, int);

}  // namespace HWY_NAMESPACE
}  // namespace m3
#endif  // HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
HWY_AFTER_NAMESPACE();
