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

// Both page types' QkBlockMaxPaged: T = uint8_t is an fp8 cache, with each page's key scales.
template <typename T>
void BlockMaxOfPages(const float* q, int nq, int dim, const T* const* pages, const uint8_t* const* scales, int n_pages,
                     int B, float* out, int out_stride) {
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
