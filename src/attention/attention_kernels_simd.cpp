// The attention inner loops from one source for every SIMD target (Google Highway): AVX2+FMA,
// AVX-512, NEON and SVE tables of AttentionKernels (base/cpu_dispatch.h picks one at run time).
// This file holds the online softmax, P·V and the tables; the q·k kernels are in
// attention_scores_simd.cpp and attention_block_max_simd.cpp, what all three use in
// attention_simd-inl.h.
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
#include "attention/attention_simd-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
namespace m3 {
namespace HWY_NAMESPACE {
namespace {

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

// exp(x) for x <= 0 (softmax weights): 2^(x·log2e) by range reduction, degree-6 polynomial for
// 2^f on [-0.5, 0.5]; relative error ~2e-7. x is clamped at -87 so that 2^n stays a normal
// number: weights below e^-87 (1e-38, which no sum next to the maximum's weight of 1 can see)
// come out as about 1e-38 instead of 0.
//
// n = round(t) by adding 1.5·2^23 + 128: in [2^23, 2^24) a float's ulp is 1, so the add rounds t to
// the nearest integer, ties to even (the constant is even), and leaves n + 128 in the low mantissa
// bits, which a shift moves into the exponent field: 2^(n + 1). The polynomial's coefficients are
// halved to match (exact: powers of two scale every rounding alike), so the result has the bits
// of round(t), 2^f·2^n. Three operations where Round, ConvertTo (with Highway's out-of-range fix-up
// on x86) and the exponent bias took six.
HWY_INLINE VF Exp(DF df, VF x) {
  const DI di;
  constexpr float kShift = 12582912.0f + 128.0f;  // 1.5·2^23 + 128
  x = hn::Max(x, hn::Set(df, -87.0f));
  const VF t = hn::Mul(x, hn::Set(df, 1.44269504088896341f));
  const VF shifted = hn::Add(t, hn::Set(df, kShift));
  const VF f = hn::Sub(t, hn::Sub(shifted, hn::Set(df, kShift)));
  VF p = hn::Set(df, 0.5f * 1.5403530393381606e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 0.5f * 1.3333558146428443e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.5f * 9.6181291076284772e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.5f * 5.5504108664821580e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.5f * 2.4022650695910071e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.5f * 6.9314718055994531e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 0.5f));
  const VF scale = hn::BitCast(df, hn::ShiftLeft<23>(hn::BitCast(di, shifted)));  // 2^(n + 1)
  return hn::Mul(p, scale);
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
// file). The factors are made once a call, then each head's row is a vector product (column by
// column in scalars, this took half as long as the P·V it feeds at the tiny preset's shape).
float* ScaledWeights(const float* P, int heads, int ld, int n_keys, const uint8_t* const* scales, int B) {
  struct Scratch {
    float* p = nullptr;
    size_t cap = 0;
    ~Scratch() { delete[] p; }
    float* get(size_t need) {
      if (cap < need) {
        delete[] p;
        p = new float[need];
        cap = need;
      }
      return p;
    }
  };
  thread_local Scratch scratch, factors;
  const DF df;
  const int N = int(hn::Lanes(df));
  float* buf = scratch.get(size_t(heads) * size_t(n_keys > 0 ? n_keys : 1));
  float* f = factors.get(size_t(n_keys > 0 ? n_keys : 1));
  for (int t0 = 0, p = 0; t0 < n_keys; t0 += B, ++p) {
    const int rows = Min(B, n_keys - t0);
    for (int t = t0; t < t0 + rows; ++t) {
      const uint32_t bits = uint32_t(scales[p][t - t0] + 8) << 23;
      __builtin_memcpy(&f[t], &bits, sizeof(float));
    }
  }
  for (int h = 0; h < heads; ++h) {
    const float* src = P + int64_t(h) * ld;
    float* dst = buf + size_t(h) * n_keys;
    int t = 0;
    for (; t + N <= n_keys; t += N) hn::StoreU(hn::Mul(hn::LoadU(df, src + t), hn::LoadU(df, f + t)), df, dst + t);
    for (; t < n_keys; ++t) dst[t] = src[t] * f[t];
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

// p = exp(s[t, t + n) - max) stored back over s[t, t + n) (n > 0). `room`: floats writable and
// readable from s (the row stride left).
HWY_INLINE void ExpStore(DF df, float* s, int n, int room, VF vmax) {
  const int N = int(hn::Lanes(df));
  if (n >= N) return hn::StoreU(Exp(df, hn::Sub(hn::LoadU(df, s), vmax)), df, s);
  const VF x = room >= N ? hn::LoadU(df, s) : LoadFirst(df, s, n);
  StoreFirst(df, Exp(df, hn::Sub(x, vmax)), s, n);
}

// The first n of the weights ExpStore stored at s, the lanes past n zero (n may be <= 0).
HWY_INLINE VF LoadWeights(DF df, const float* s, int n) {
  if (n >= int(hn::Lanes(df))) return hn::LoadU(df, s);
  if (n <= 0) return hn::Zero(df);
  return LoadFirst(df, s, n);
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

// max(m, s[0, n)) of one head's scores.
HWY_INLINE float RowMax(DF df, const float* s, int n, int ld, float m) {
  const int N = int(hn::Lanes(df));
  // Two chains (a maximum does not depend on the order).
  VF vmax = hn::Set(df, m), vmax1 = vmax;
  int t = 0;
  for (; t + 2 * N <= n; t += 2 * N) {
    vmax = hn::Max(vmax, hn::LoadU(df, s + t));
    vmax1 = hn::Max(vmax1, hn::LoadU(df, s + t + N));
  }
  vmax = hn::Max(vmax, vmax1);
  for (; t + N <= n; t += N) vmax = hn::Max(vmax, hn::LoadU(df, s + t));
  if (t < n) {
    const int k = n - t;
    const VF x = ld - t >= N ? hn::LoadU(df, s + t) : LoadFirst(df, s + t, k);
    vmax = hn::Max(vmax, hn::IfThenElse(hn::FirstN(df, size_t(k)), x, hn::Set(df, -HUGE_VALF)));
  }
  return hn::GetLane(hn::MaxOfLanes(df, vmax));
}

// Heads a softmax pass takes at once (a dense call of the tiny preset has 32, M3's 32).
constexpr int kSoftmaxHeads = 64;

// The step in passes over all the heads, each a stream of independent work: the maxima, the
// corrections (a vector of heads), the weights, then the sums. Head by head, each head's work
// waited on its own (a maximum, a horizontal reduction, then the weights), and AVX2 (16
// registers, 9 of them the exponential's constants) kept the running sum of the weights on the
// stack: a quarter of the tiny preset's dense step (docs/BENCHMARKS.md §0y).
void SoftmaxBlockUpdate(float* S, int heads, int ld, int n_keys, float* m, float* l, float* o, int hd) {
  const DF df;
  const int N = int(hn::Lanes(df));
  alignas(64) float m_old[kSoftmaxHeads + kMaxLanes], m_new[kSoftmaxHeads + kMaxLanes];
  alignas(64) float corr[kSoftmaxHeads + kMaxLanes];
  for (int h0 = 0; h0 < heads; h0 += kSoftmaxHeads) {
    const int nh = Min(kSoftmaxHeads, heads - h0);
    float* const S0 = S + int64_t(h0) * ld;
    for (int h = 0; h < nh; ++h) {
      m_old[h] = m[h0 + h];
      m_new[h] = RowMax(df, S0 + int64_t(h) * ld, n_keys, ld, m_old[h]);
    }
    for (int h = nh; h < nh + N; ++h) m_old[h] = m_new[h] = 0.0f;
    // The same polynomial as the weights (no libm call per head and block); m = -inf on the first
    // block gives e^-87, against l = 0 and o = 0, and an unchanged maximum gives exactly 1.
    for (int h = 0; h < nh; h += N) {
      const VF mo = hn::Load(df, m_old + h), mn = hn::Load(df, m_new + h);
      hn::Store(hn::IfThenElse(hn::Eq(mo, mn), hn::Set(df, 1.0f), Exp(df, hn::Sub(mo, mn))), df, corr + h);
    }
    for (int h = 0; h < nh; ++h) {
      float* s = S0 + int64_t(h) * ld;
      const VF vm = hn::Set(df, m_new[h]);
      for (int t = 0; t < n_keys; t += N) ExpStore(df, s + t, n_keys - t, ld - t, vm);
    }
    for (int h = 0; h < nh; ++h) {
      const float* s = S0 + int64_t(h) * ld;
      // The sum in 16 fixed lanes (key t adds to lane t % 16) whatever N is (4, 8 or 16), reduced
      // in a fixed order: the same bits on every vector width.
      VF acc0 = hn::Zero(df), acc1 = hn::Zero(df), acc2 = hn::Zero(df), acc3 = hn::Zero(df);
      for (int t = 0; t < n_keys; t += kMaxLanes) {
        acc0 = hn::Add(acc0, LoadWeights(df, s + t, n_keys - t));
        if (N <= 8) acc1 = hn::Add(acc1, LoadWeights(df, s + t + N, n_keys - t - N));
        if (N <= 4) {
          acc2 = hn::Add(acc2, LoadWeights(df, s + t + 2 * N, n_keys - t - 2 * N));
          acc3 = hn::Add(acc3, LoadWeights(df, s + t + 3 * N, n_keys - t - 3 * N));
        }
      }
      alignas(64) float lanes[kMaxLanes];
      hn::Store(acc0, df, lanes);
      if (N <= 8) hn::Store(acc1, df, lanes + N);
      if (N <= 4) {
        hn::Store(acc2, df, lanes + 2 * N);
        hn::Store(acc3, df, lanes + 3 * N);
      }
      l[h0 + h] = l[h0 + h] * corr[h] + SumOf16Lanes(lanes);
      m[h0 + h] = m_new[h];
      if (corr[h] == 1.0f) continue;  // o * 1 is o
      const VF vc = hn::Set(df, corr[h]);
      float* oh = o + int64_t(h0 + h) * hd;
      int d = 0;
      for (; d + N <= hd; d += N) hn::StoreU(hn::Mul(hn::LoadU(df, oh + d), vc), df, oh + d);
      if (d < hd) StoreFirst(df, hn::Mul(LoadFirst(df, oh + d, hd - d), vc), oh + d, hd - d);
    }
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
  if constexpr (k < H * V) acc##k = MulAddBroadcast(Pick<k % V>(v0, v1, v2, v3), P + int64_t(k / V) * ld + t, acc##k);
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
