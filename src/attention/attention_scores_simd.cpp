// q·k scores of the attention tables from one Highway source: queries against a block's keys or
// a step's pages, stored to rows of S (the tiles: attention_qk_tiles-inl.h; the tables:
// attention_kernels_simd.cpp).
#include "base/simd_targets.h"  // the targets compiled
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_scores_simd.cpp"
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

// Stores score vectors to S rows (stride ld), the last one cut at n_keys. With scales (an fp8
// cache) each key's score is multiplied by its power-of-two scale first: q·(k x 2^e) exactly.
// kScaled: the fp8 kernels' sink; the others leave out the scale tests (a tile of the tiny
// preset's 32 dims stores 12 vectors per 384 multiply-adds, so its sink is not free).
template <bool kScaled>
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
    if constexpr (kScaled) {
      if (scales != nullptr) v = hn::Mul(v, LoadScales(df, scales, t, scale_len));
      if (page_scales != nullptr)
        v = hn::Mul(v, LoadScales(df, page_scales[t / page_keys], t % page_keys, page_keys));
    }
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

}  // namespace

template <typename T>
void QkScores(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* S, int ld,
              const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, QkSteps(nq, dim, n_keys));
  ScoreStore<false> store{S, ld, n_keys};
  QkForTiles(q, nq, dim, BlockKeys<T>{kT, kt_stride, n_keys}, store, pf);
}

// An fp8 cache: E4M3 keys with one scale per key (its column of kT).
void QkScoresFp8(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride, int n_keys,
                 float* S, int ld, const void* pf_region, size_t pf_bytes) {
  Prefetch pf(pf_region, pf_bytes, QkSteps(nq, dim, n_keys));
  ScoreStore<true> store{S, ld, n_keys};
  store.scales = scales;
  store.scale_len = kt_stride;
  QkForTiles(q, nq, dim, BlockKeys<uint8_t>{kT, kt_stride, n_keys}, store, pf);
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
  ScoreStore<false> store{S, ld, n_keys};
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
  ScoreStore<true> store{S, ld, n_keys};
  store.page_scales = scales;
  store.page_keys = B;
  QkForTiles(q, nq, dim, PagedKeys<uint8_t>{pages, B, n_keys}, store, pf);
}

template void QkScores<float>(const float*, int, int, const float*, int, int, float*, int, const void*, size_t);
template void QkScores<uint16_t>(const float*, int, int, const uint16_t*, int, int, float*, int, const void*, size_t);
template void QkScoresPaged<float>(const float*, int, int, const float* const*, int, int, float*, int);
template void QkScoresPaged<uint16_t>(const float*, int, int, const uint16_t* const*, int, int, float*, int);

}  // namespace HWY_NAMESPACE
}  // namespace m3
#endif  // HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
HWY_AFTER_NAMESPACE();
