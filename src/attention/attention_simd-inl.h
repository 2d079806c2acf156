// What the Highway attention sources share: attention_scores_simd.cpp and
// attention_block_max_simd.cpp (q·k, their tiles in attention_qk_tiles-inl.h), and
// attention_kernels_simd.cpp (the online softmax, P·V and the tables of all three). The vector
// types and tile sizes, the widening loads, the prefetch spread over a loop, the named
// accumulators of a tile, and the q·k entry points the tables point to. Three sources so that the
// targets' copies compile side by side: as one file it was the last object of the aarch64 cross
// build and of the ASan build (docs/BENCHMARKS.md §0u).
//
// Highway's per-target header convention: each source includes this after hwy/foreach_target.h,
// once per target, and gets that target's copy in m3::HWY_NAMESPACE. The macros are the same text
// every time.
#if defined(M3_ATTENTION_ATTENTION_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef M3_ATTENTION_ATTENTION_SIMD_INL_H_
#undef M3_ATTENTION_ATTENTION_SIMD_INL_H_
#else
#define M3_ATTENTION_ATTENTION_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "m3/dtype.h"

// A tile's accumulators acc0..acc15 (SVE vectors cannot live in arrays): M3_ACC16(M) expands M
// for each index, the unused ones compile away.
#define M3_ACC16(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)

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

constexpr int Min(int a, int b) { return a < b ? a : b; }
HWY_INLINE float MaxF(float a, float b) { return a > b ? a : b; }

// acc + v · x, x the fp32 at p in every lane. On AVX-512 the multiply-add broadcasts x itself (an
// embedded broadcast): a broadcast of its own runs on Zen 4's shuffle unit, which the bf16
// widening (vpmovzxwd) needs too, and a q·k tile's 4 broadcasts and 4 widenings per dimension
// beside its 16 multiply-adds kept that unit as busy as the FMA units (docs/BENCHMARKS.md §0zd).
// The same operation, so the same bits. Elsewhere the compiler broadcasts x once for every use.
HWY_INLINE VF MulAddBroadcast(VF v, const float* p, VF acc) {
#if HWY_TARGET == HWY_AVX3
  asm("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc.raw) : "v"(v.raw), "m"(*p));
  return acc;
#else
  return hn::MulAdd(hn::Set(DF(), *p), v, acc);
#endif
}

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

// The j-th of four vectors, chosen at compile time.
template <int j>
HWY_INLINE VF Pick(VF v0, VF v1, VF v2, VF v3) {
  if constexpr (j == 0) return v0;
  else if constexpr (j == 1) return v1;
  else if constexpr (j == 2) return v2;
  else return v3;
}

}  // namespace

// The q·k entry points (attention_scores_simd.cpp, attention_block_max_simd.cpp; arguments as
// in attention_kernels_impl.h). The templates are instantiated there for float and uint16_t.
template <typename T>
void QkScores(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* S, int ld,
              const void* pf_region, size_t pf_bytes);
template <typename T>
void QkBlockMax(const float* q, int nq, int dim, const T* kT, int kt_stride, int n_keys, float* out,
                const void* pf_region, size_t pf_bytes);
void QkScoresFp8(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride, int n_keys,
                 float* S, int ld, const void* pf_region, size_t pf_bytes);
void QkBlockMaxFp8(const float* q, int nq, int dim, const uint8_t* kT, const uint8_t* scales, int kt_stride,
                   int n_keys, float* out, const void* pf_region, size_t pf_bytes);
template <typename T>
void QkScoresPaged(const float* q, int nq, int dim, const T* const* pages, int B, int n_keys, float* S, int ld);
void QkScoresPagedFp8(const float* q, int nq, int dim, const uint8_t* const* pages, const uint8_t* const* scales, int B,
                      int n_keys, float* S, int ld);
template <typename T>
void QkBlockMaxPaged(const float* q, int nq, int dim, const T* const* pages, int n_pages, int B, float* out,
                     int out_stride);
void QkBlockMaxPagedFp8(const float* q, int nq, int dim, const uint8_t* const* pages, const uint8_t* const* scales,
                        int n_pages, int B, float* out, int out_stride);

}  // namespace HWY_NAMESPACE
}  // namespace m3
#endif  // HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
HWY_AFTER_NAMESPACE();

#endif  // M3_ATTENTION_ATTENTION_SIMD_INL_H_ toggle
