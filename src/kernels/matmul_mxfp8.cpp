// MXFP8's panel fill and direct tiles on AVX2 and AVX-512: E4M3 bytes widened to fp32 in registers
// and multiplied by the block's UE8M0 scale, the same values as the format's table-driven
// dequantize_cols (bit for bit: both widen exactly and round one fp32 product). Decode streams 1.03
// bytes per weight, so it is bound by how fast this runs (docs/FORMATS.md).
//
// E4M3 (sign, 4 exponent bits with bias 7, 3 mantissa bits) widens through F16 (5 exponent bits,
// bias 15, 10 mantissa bits): the byte's magnitude shifted up by 7 and its sign by 8 is an F16 of
// value e4m3 x 2^-8, subnormals included, which the F16C conversion widens exactly (no fp32
// subnormal operand, which would cost a microcode assist on some CPUs). One multiply by
// 2^8 x 2^(s - 127) then rounds the product once, as the tables' e4m3 x 2^(s - 127) does. Where
// 2^(s - 119) is not a finite fp32 (s > 246) the two factors are applied one after the other,
// which is the same value (x 2^8 is exact). A block holding a NaN code (0x7f, 0xff) takes the
// tables: real checkpoints have none, so a direct tile only flags NaN codes as it widens and, if
// any was seen, runs again with a check per block (matmul_blocked_tile.h).
#include "kernels/matmul_tile.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "kernels/matmul_blocked_tile.h"

#define M3_AVX2 __attribute__((target("avx2,fma,f16c")))
#define M3_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace m3::matmul_detail {
namespace {

// Bytes ahead in each row of E4M3 codes, and in each row of scale bytes (asked for once per chunk
// of block factors). One-thread decode streaming from DRAM on a Zen 5 guest, 512 bytes and no scale
// prefetch against these: 1.13-1.39 ms against 1.04-1.10 ms at 6144 x 3072, faster in each of 3
// alternated rounds (docs/BENCHMARKS.md §0o). The panel fills ask this far ahead; the direct tiles
// (decode) direct_tile_prefetch_bytes(), which is this on Zen 5 and 512 where the L1D is smaller.
constexpr int kPrefetchAhead = 1024;
constexpr int kScalePrefetchAhead = 64;
constexpr int kMaxPanelRows = 16;    // more than any path's panel_nr

// The rows' E4M3 and scale bytes, found once per panel, and the strides once (a lookup divides).
inline void row_pointers(const LinearWeight& w, int64_t n, int64_t row_step, int rows, const uint8_t** q,
                         const uint8_t** s) {
  if (rows > kMaxPanelRows) std::abort();  // a planning bug
  const int64_t q_step = w.row_bytes() * row_step, s_step = w.side_row_bytes(0) * row_step;
  q[0] = w.row_ptr(n);
  s[0] = w.side_row(0, n);
  for (int j = 1; j < rows; ++j) {
    q[j] = q[j - 1] + q_step;
    s[j] = s[j - 1] + s_step;
  }
}

// The factor the F16 values are multiplied by, or two factors when one would overflow.
struct BlockScale {
  float first, second;  // second = 1 unless s > 246
};
inline BlockScale block_scale(uint8_t s) {
  if (s <= 246) return {ue8m0_to_f32(uint8_t(s + 8)), 1.0f};
  return {256.0f, ue8m0_to_f32(s)};
}

// The scalar tables' values, for a block with a NaN code.
inline void block_from_tables(const LinearWeight& w, int64_t r, int64_t kb, float* out) {
  w.format->dequantize_cols(w, r, kb * kBlock, (kb + 1) * kBlock, out);
}

M3_AVX2 inline bool has_nan_code(const uint8_t* q) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi8(0x7f));
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(mag, _mm256_set1_epi8(0x7f))) != 0;
}

// E4M3 bytes as F16 bits: sign-extended to 16 bits and shifted up by 7, a byte has its sign in
// bits 15 and 14 and its magnitude in bits 7-13 (bits 0-6 are zero), so clearing bit 14 leaves the
// F16 of value e4m3 x 2^-8: two integer operations after the widening load, where placing the sign
// and the magnitude apart took four.
constexpr uint16_t kF16Bits = 0xbf80;

// 16 E4M3 bytes as F16 bits in one 16 x 16-bit vector, widened to fp32 in halves.
M3_AVX2 inline void e4m3x16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(int16_t(kF16Bits)));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// A block's 32 values times (s1, then s2 unless it is 1), as lanes 0-7, 8-15, 16-23, 24-31.
M3_AVX2 inline void e4m3_block(const uint8_t* q, float s1, float s2, __m256 (&v)[4]) {
  e4m3x16(q, v[0], v[1]);
  e4m3x16(q + 16, v[2], v[3]);
  const __m256 m1 = _mm256_set1_ps(s1);
  for (int i = 0; i < 4; ++i) v[i] = _mm256_mul_ps(v[i], m1);
  if (s2 != 1.0f) {
    const __m256 m2 = _mm256_set1_ps(s2);
    for (int i = 0; i < 4; ++i) v[i] = _mm256_mul_ps(v[i], m2);
  }
}

// 32 E4M3 bytes as two 16-byte halves: the integer work at 256 bits (half a zmm operation's cost on
// cores that split 512-bit operations) and each half's F16 widened straight to a zmm, where one
// 512-bit pass needed a cross-lane extract too (docs/BENCHMARKS.md §0n).
M3_AVX512 inline void e4m3x32(const uint8_t* p, __m512& lo, __m512& hi) {
  const __m256i c = _mm256_set1_epi16(int16_t(kF16Bits));
  const __m256i h0 = _mm256_and_si256(
      _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 7), c);
  const __m256i h1 = _mm256_and_si256(
      _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))), 7), c);
  lo = _mm512_cvtph_ps(h0);
  hi = _mm512_cvtph_ps(h1);
}

// MXFP8 for the shared blocked loops (matmul_blocked_tile.h): the panel fills, and the checked
// tiles that a direct tile falls back on.
struct Mxfp8Policy {
  struct Rows {
    const LinearWeight* w;
    int64_t n, row_step;
    const uint8_t* q[kMaxPanelRows];
    const uint8_t* s[kMaxPanelRows];
    Rows(const LinearWeight& lw, int64_t first, int64_t step, int nr) : w(&lw), n(first), row_step(step) {
      row_pointers(lw, first, step, nr, q, s);
    }
  };
  static void prefetch(const Rows& r, int j, int64_t kb) {
    _mm_prefetch(reinterpret_cast<const char*>(r.q[j] + kb * kBlock + kPrefetchAhead), _MM_HINT_T0);
  }
  // Each block's factors (block_scale): a = the first, b = the second. A chunk without a rare
  // scale (real checkpoints have none) is converted 8 scales to a vector: the scalar loop was a
  // fifth of a direct tile's time (docs/BENCHMARKS.md §0k); b is read only when p.rare is set.
  M3_AVX2 static void params(const Rows& r, int j, int64_t kb0, int nb, blocked::BlockParams& p) {
    const uint8_t* src = r.s[j] + kb0;
    _mm_prefetch(reinterpret_cast<const char*>(src) + kScalePrefetchAhead, _MM_HINT_T0);
    alignas(16) uint8_t tail[blocked::kParamBlocks] = {};
    if (nb < blocked::kParamBlocks) {  // the row's last chunk: a full load could leave the tensor
      for (int i = 0; i < nb; ++i) tail[i] = src[i];
      src = tail;
    }
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m256i lo = _mm256_cvtepu8_epi32(bytes), hi = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(bytes, bytes));
    const __m256i limit = _mm256_set1_epi32(246);
    p.rare = !_mm256_testz_si256(_mm256_or_si256(_mm256_cmpgt_epi32(lo, limit), _mm256_cmpgt_epi32(hi, limit)),
                                 _mm256_set1_epi32(-1));
    if (!p.rare) {  // 2^(s + 8 - 127): the exponent field s + 8 (at least 8, so a normal number)
      const __m256i eight = _mm256_set1_epi32(8);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.a), _mm256_slli_epi32(_mm256_add_epi32(lo, eight), 23));
      _mm256_store_si256(reinterpret_cast<__m256i*>(p.a + 8), _mm256_slli_epi32(_mm256_add_epi32(hi, eight), 23));
      return;
    }
    for (int i = 0; i < nb; ++i) {
      const BlockScale bs = block_scale(r.s[j][kb0 + i]);
      p.a[i] = bs.first;
      p.b[i] = bs.second;
      p.rare |= bs.second != 1.0f;
    }
  }
  // Every block has its own scale: a group is one block, whose first factor each multiply
  // broadcasts itself (blocked::mul_broadcast512).
  static int blocks_per_group_log2(const Rows&) { return 0; }
  struct Group512 {};
  static Group512 group512(const Rows&, const blocked::BlockParams&, int64_t, int) { return {}; }
  // A block holding a NaN code takes the tables.
  M3_AVX512 static void widen512(const Rows& r, int j, int64_t kb, const blocked::BlockParams& p, const Group512&,
                                 int i, __m512& w0, __m512& w1) {
    const uint8_t* q = r.q[j] + kb * kBlock;
    if (has_nan_code(q)) {
      alignas(64) float buf[kBlock];
      block_from_tables(*r.w, r.n + j * r.row_step, kb, buf);
      w0 = _mm512_load_ps(buf);
      w1 = _mm512_load_ps(buf + 16);
      return;
    }
    e4m3x32(q, w0, w1);
    w0 = blocked::mul_broadcast512(w0, &p.a[i]);
    w1 = blocked::mul_broadcast512(w1, &p.a[i]);
    if (p.rare && p.b[i] != 1.0f) {
      w0 = _mm512_mul_ps(w0, _mm512_set1_ps(p.b[i]));
      w1 = _mm512_mul_ps(w1, _mm512_set1_ps(p.b[i]));
    }
  }
  M3_AVX2 static void widen256(const Rows& r, int j, int64_t kb, const blocked::BlockParams& p, int i,
                               __m256 (&v)[4]) {
    const uint8_t* q = r.q[j] + kb * kBlock;
    if (has_nan_code(q)) {
      alignas(32) float buf[kBlock];
      block_from_tables(*r.w, r.n + j * r.row_step, kb, buf);
      for (int c = 0; c < 4; ++c) v[c] = _mm256_load_ps(buf + 8 * c);
      return;
    }
    e4m3_block(q, p.a[i], p.rare ? p.b[i] : 1.0f, v);
  }
};


// The AVX-512 direct tiles (decode), a loop of their own: each row's block factors converted 32
// blocks (a line of scale bytes) at a time, then a plain walk over the blocks two at a time (a
// 64-byte line of codes per row, prefetched once). The shared blocked loop (matmul_blocked_tile.h)
// kept a rare-scale test, a factor broadcast and a prefetch per block and row, and widened at 256
// bits (docs/BENCHMARKS.md §0q). Either widening below gives each code's exact value times a power
// of two, and one product by the block's factor rounds it once, so the weights are the panel
// fill's and the FMAs are in the same order: the bits are the panel path's. NaN codes are found
// on the raw bytes (a byte doubled is 0xfe for 0x7f and 0xff alone, and the largest doubled byte
// is kept); a tile that saw one, or whose rows have a scale the widening's single factor cannot
// hold, is done again by the shared loop's checked tile (tile512_checked), which handles both. Real checkpoints have
// neither.
// The widenings (Mxfp8Widening, matmul_tile.h): F16 through e4m3x32's F16 pattern, value
// e4m3 x 2^-8, so no fp32 subnormal is formed; F32 straight to fp32 bits, value e4m3 x 2^-120, two
// conversions fewer per block, where E4M3 subnormals become fp32 subnormals, which some cores
// multiply through a microcode assist.
constexpr int kChunkBlocks = 32;

// The direct tiles' walk over the blocks of K: chunk(kb0, nb) readies the factors of blocks kb0 ..
// kb0 + nb - 1 (false: the tile cannot run them), then block(kb, i, line, pair) runs each block
// (i = kb - kb0), two at a time, so that `line` marks the first block of each 64-byte line of
// codes, and `pair` a first block whose partner (the next block) follows in the same walk.
// Always inlined, so that the tiles' lambdas inline into their own target's code.
template <class Chunk, class Block>
__attribute__((always_inline)) inline bool walk_blocks(int64_t KB, Chunk& chunk, Block& block) {
  for (int64_t kb0 = 0; kb0 < KB; kb0 += kChunkBlocks) {
    const int nb = int(std::min<int64_t>(kChunkBlocks, KB - kb0));
    if (!chunk(kb0, nb)) return false;
    int i = 0;
    for (; i + 2 <= nb; i += 2) {
      block(kb0 + i, i, true, true);
      block(kb0 + i + 1, i + 1, false, false);
    }
    if (i < nb) block(kb0 + i, i, true, false);
  }
  return true;
}

// A block's 32 codes as fp32, lanes 0-15 and 16-31.
template <Mxfp8Widening W>
M3_AVX512 inline void widen_block(const uint8_t* p, __m512& lo, __m512& hi) {
  if constexpr (W == Mxfp8Widening::F16) {
    const __m512i h = _mm512_and_si512(
        _mm512_slli_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 7),
        _mm512_set1_epi16(int16_t(kF16Bits)));
    lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  } else {
    // Sign-extended to 32 bits and shifted up by 20, the byte's magnitude lands in bits 20-26 (the
    // exponent's low 4 bits and the mantissa's top 3) and its sign in bits 27-31: keep bit 31.
    const __m512i keep = _mm512_set1_epi32(int32_t(0x87f00000u));
    lo = _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_slli_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 20), keep));
    hi = _mm512_castsi512_ps(_mm512_and_si512(
        _mm512_slli_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))), 20), keep));
  }
}

// The factors 2^(s - 127) / (the widening's power of two) of n (<= 32) blocks' scale bytes, as
// fp32 bits: exponent field s + 8 (F16) or s + 120 (F32). False if a scale's factor is not a
// finite fp32 (s > 246, or s > 134): those take the checked tile's two factors.
template <Mxfp8Widening W>
M3_AVX512 inline bool chunk_factors(const uint8_t* src, int n, float* dst) {
  constexpr int kShift = W == Mxfp8Widening::F16 ? 8 : 120;
  const __mmask32 live = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
  const __m256i bytes = _mm256_maskz_loadu_epi8(live, src);  // never past the tensor's end
  if (_mm256_cmpgt_epu8_mask(bytes, _mm256_set1_epi8(char(254 - kShift))) != 0) return false;
  const __m512i shift = _mm512_set1_epi32(kShift);
  const __m512i lo = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(bytes));
  const __m512i hi = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(bytes, 1));
  _mm512_store_si512(dst, _mm512_slli_epi32(_mm512_add_epi32(lo, shift), 23));
  _mm512_store_si512(dst + 16, _mm512_slli_epi32(_mm512_add_epi32(hi, shift), 23));
  return true;
}

template <Mxfp8Widening W, int MR, int NR>
M3_AVX512 bool direct512_pass(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  const uint8_t* q[kMaxPanelRows];
  const uint8_t* s[kMaxPanelRows];
  row_pointers(w, n, row_step, NR, q, s);
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j] = _mm512_setzero_ps();
  // The largest code byte doubled, taken over both blocks of a pair at once: one add and one
  // maximum per pair and row, where a block at a time took two per block and row (3-5% of the
  // tile's time, docs/BENCHMARKS.md §0zf).
  __m512i doubled = _mm512_setzero_si512();
  const int64_t KB = a.K / kBlock;
  const int64_t ahead = direct_tile_prefetch_bytes();
  alignas(64) float factor[NR][kChunkBlocks];
  // Block kb (the i-th of its chunk) of every row; `line` where it starts a 64-byte line of codes,
  // `pair` where the next block's codes are checked with its own.
  auto block = [&](int64_t kb, int i, bool line, bool pair) M3_AVX512 {
    __m512 x0[MR], x1[MR];
    blocked::load_x512<MR>(a, kb, x0, x1);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* c = q[j] + kb * kBlock;
      if (line) {
        _mm_prefetch(reinterpret_cast<const char*>(c + ahead), _MM_HINT_T0);
        const __m512i raw = pair ? _mm512_loadu_si512(c)
                                 : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
        doubled = _mm512_max_epu8(doubled, _mm512_add_epi8(raw, raw));
      }
      __m512 w0, w1;
      widen_block<W>(c, w0, w1);
      w0 = blocked::mul_broadcast512(w0, &factor[j][i]);
      w1 = blocked::mul_broadcast512(w1, &factor[j][i]);
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) acc[m][j] = _mm512_fmadd_ps(x1[m], w1, _mm512_fmadd_ps(x0[m], w0, acc[m][j]));
    }
  };
  auto chunk = [&](int64_t kb0, int nb) M3_AVX512 {
    for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(s[j] + kb0) + kScalePrefetchAhead, _MM_HINT_T0);
      if (!chunk_factors<W>(s[j] + kb0, nb, factor[j])) return false;
    }
    return true;
  };
  if (!walk_blocks(KB, chunk, block)) return false;
  if (_mm512_cmpeq_epi8_mask(doubled, _mm512_set1_epi8(char(0xfe))) != 0) return false;
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j]);
  return true;
}

template <Mxfp8Widening W, int MR, int NR>
M3_AVX512 void direct512_tile(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  if (!direct512_pass<W, MR, NR>(w, n, row_step, a))
    blocked::tile512_checked<Mxfp8Policy, MR, NR>(w, n, row_step, a);
}

// The shapes the planner asks for: mr <= 4 with nr <= 6 (matmul_blocked_tile.h).
template <Mxfp8Widening W, int MR, int... I>
constexpr std::array<blocked::TileFn, blocked::kMaxNr + 1> direct512_row(std::integer_sequence<int, I...>) {
  std::array<blocked::TileFn, blocked::kMaxNr + 1> row{};
  ((row[I + 1] = &direct512_tile<W, MR, I + 1>), ...);
  return row;
}
template <Mxfp8Widening W>
constexpr blocked::Table direct512_table() {
  constexpr auto nrs = std::make_integer_sequence<int, 6>{};
  return {std::array<blocked::TileFn, blocked::kMaxNr + 1>{}, direct512_row<W, 1>(nrs), direct512_row<W, 2>(nrs),
          direct512_row<W, 3>(nrs), direct512_row<W, 4>(nrs)};
}

template <Mxfp8Widening W>
void direct512(const LinearWeight& w, int64_t n, int64_t row_step, int mr, int nr, const TileArgs& a) {
  static constexpr blocked::Table kTable = direct512_table<W>();
  blocked::run(kTable, w, n, row_step, mr, nr, a);
}

// The AVX2 direct tiles: the same loop as direct512_pass, with the same two widenings at 256
// bits (F16: e4m3x16's; F32: four sign-extending loads of 8 codes), the values and the FMA order
// of tile256_checked.
template <Mxfp8Widening W>
M3_AVX2 inline void widen_block256(const uint8_t* p, __m256 (&v)[4]) {
  if constexpr (W == Mxfp8Widening::F16) {
    e4m3x16(p, v[0], v[1]);
    e4m3x16(p + 16, v[2], v[3]);
  } else {
    const __m256i keep = _mm256_set1_epi32(int32_t(0x87f00000u));
    for (int c = 0; c < 4; ++c)
      v[c] = _mm256_castsi256_ps(_mm256_and_si256(
          _mm256_slli_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * c))), 20),
          keep));
  }
}

template <Mxfp8Widening W>
M3_AVX2 inline bool chunk_factors256(const uint8_t* src, int n, float* dst) {
  constexpr int kShift = W == Mxfp8Widening::F16 ? 8 : 120;
  alignas(32) uint8_t tail[kChunkBlocks] = {};
  if (n < kChunkBlocks) {  // the row's last chunk: a full load could leave the tensor
    for (int i = 0; i < n; ++i) tail[i] = src[i];
    src = tail;
  }
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m256i limit = _mm256_set1_epi8(char(254 - kShift));  // no unsigned byte compare on AVX2
  if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(bytes, limit), limit)) != -1) return false;
  const __m256i shift = _mm256_set1_epi32(kShift);
  for (int q = 0; q < 4; ++q) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * q)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 8 * q), _mm256_slli_epi32(_mm256_add_epi32(v, shift), 23));
  }
  return true;
}

template <Mxfp8Widening W, int MR, int NR>
M3_AVX2 bool direct256_pass(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  const uint8_t* q[kMaxPanelRows];
  const uint8_t* s[kMaxPanelRows];
  row_pointers(w, n, row_step, NR, q, s);
  __m256 acc[MR][NR][2];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) acc[m][j][0] = acc[m][j][1] = _mm256_setzero_ps();
  __m256i doubled = _mm256_setzero_si256();  // the largest code byte doubled, as in direct512_pass
  const int64_t KB = a.K / kBlock;
  const int64_t ahead = direct_tile_prefetch_bytes();
  alignas(32) float factor[NR][kChunkBlocks];
  auto block = [&](int64_t kb, int i, bool line, bool) M3_AVX2 {
    const float* x = a.x + kb * a.x_block_stride;
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* c = q[j] + kb * kBlock;
      if (line) _mm_prefetch(reinterpret_cast<const char*>(c + ahead), _MM_HINT_T0);
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
      doubled = _mm256_max_epu8(doubled, _mm256_add_epi8(raw, raw));
      __m256 v[4];
      widen_block256<W>(c, v);
      const __m256 f = _mm256_broadcast_ss(&factor[j][i]);
      for (int c4 = 0; c4 < 4; ++c4) v[c4] = _mm256_mul_ps(v[c4], f);
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const float* xm = x + m * a.x_stride;
        acc[m][j][0] =
            _mm256_fmadd_ps(_mm256_loadu_ps(xm + 16), v[2], _mm256_fmadd_ps(_mm256_loadu_ps(xm), v[0], acc[m][j][0]));
        acc[m][j][1] =
            _mm256_fmadd_ps(_mm256_loadu_ps(xm + 24), v[3], _mm256_fmadd_ps(_mm256_loadu_ps(xm + 8), v[1], acc[m][j][1]));
      }
    }
  };
  auto chunk = [&](int64_t kb0, int nb) M3_AVX2 {
    for (int j = 0; j < NR; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(s[j] + kb0) + kScalePrefetchAhead, _MM_HINT_T0);
      if (!chunk_factors256<W>(s[j] + kb0, nb, factor[j])) return false;
    }
    return true;
  };
  if (!walk_blocks(KB, chunk, block)) return false;
  if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(doubled, _mm256_set1_epi8(char(0xfe)))) != 0) return false;
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NR; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j][0], acc[m][j][1]);
  return true;
}

template <Mxfp8Widening W, int MR, int NR>
M3_AVX2 void direct256_tile(const LinearWeight& w, int64_t n, int64_t row_step, const TileArgs& a) {
  if (!direct256_pass<W, MR, NR>(w, n, row_step, a)) blocked::tile256_checked<Mxfp8Policy, MR, NR>(w, n, row_step, a);
}

// The AVX2 planner's shapes: mr <= 3 with nr <= 6, 3, 2.
template <Mxfp8Widening W, int MR, int... I>
constexpr std::array<blocked::TileFn, blocked::kMaxNr + 1> direct256_row(std::integer_sequence<int, I...>) {
  std::array<blocked::TileFn, blocked::kMaxNr + 1> row{};
  ((row[I + 1] = &direct256_tile<W, MR, I + 1>), ...);
  return row;
}
template <Mxfp8Widening W>
constexpr blocked::Table direct256_table() {
  return {std::array<blocked::TileFn, blocked::kMaxNr + 1>{}, direct256_row<W, 1>(std::make_integer_sequence<int, 6>{}),
          direct256_row<W, 2>(std::make_integer_sequence<int, 3>{}),
          direct256_row<W, 3>(std::make_integer_sequence<int, 2>{}), std::array<blocked::TileFn, blocked::kMaxNr + 1>{}};
}

template <Mxfp8Widening W>
void direct256(const LinearWeight& w, int64_t n, int64_t row_step, int mr, int nr, const TileArgs& a) {
  static constexpr blocked::Table kTable = direct256_table<W>();
  blocked::run(kTable, w, n, row_step, mr, nr, a);
}

}  // namespace

// M3_MXFP8_WIDENING=f16|f32, read once: the widening the direct tiles use where the path has it
// (for side-by-side measurements; both give the same bits).
static std::optional<Mxfp8Widening> forced_widening() {
  static const std::optional<Mxfp8Widening> forced = []() -> std::optional<Mxfp8Widening> {
    const char* env = std::getenv("M3_MXFP8_WIDENING");
    if (env == nullptr || *env == '\0') return std::nullopt;
    for (Mxfp8Widening w : {Mxfp8Widening::F16, Mxfp8Widening::F32})
      if (std::strcmp(env, mxfp8_widening_name(w)) == 0) return w;
    std::fprintf(stderr, "m3: warning: M3_MXFP8_WIDENING=%s is not one of f16, f32; ignored\n", env);
    return std::nullopt;
  }();
  return forced;
}

Mxfp8Widening mxfp8_default_widening(CpuPath path) {
  if (const std::optional<Mxfp8Widening> w = forced_widening()) {
    const std::vector<Mxfp8Widening> all = mxfp8_widenings(path);
    if (std::find(all.begin(), all.end(), *w) != all.end()) return *w;
  }
  const CpuFeatures& f = cpu_features();
  return f.fast_subnormal_operands ? Mxfp8Widening::F32 : Mxfp8Widening::F16;
}

std::vector<Mxfp8Widening> mxfp8_widenings(CpuPath path) {
  if (path != CpuPath::Avx2 && path != CpuPath::Avx512) return {Mxfp8Widening::F16};
  return {Mxfp8Widening::F16, Mxfp8Widening::F32};
}

BlockedTile mxfp8_direct_tile(CpuPath path, Mxfp8Widening widening) {
  switch (path) {
    case CpuPath::Avx2:
      return widening == Mxfp8Widening::F16 ? &direct256<Mxfp8Widening::F16> : &direct256<Mxfp8Widening::F32>;
    case CpuPath::Avx512:
      return widening == Mxfp8Widening::F16 ? &direct512<Mxfp8Widening::F16> : &direct512<Mxfp8Widening::F32>;
    default: return nullptr;
  }
}

PanelFill mxfp8_panel_fill(CpuPath path) {
  switch (path) {
    case CpuPath::Avx2: return &blocked::fill256<Mxfp8Policy>;
    case CpuPath::Avx512: return &blocked::fill512<Mxfp8Policy>;
    default: return nullptr;
  }
}

}  // namespace m3::matmul_detail

#else

namespace m3::matmul_detail {
// Other architectures (NEON, SVE): the Highway fill and direct tiles.
PanelFill mxfp8_panel_fill(CpuPath path) {
  const BlockedSimdKernels* f = simd_blocked_kernels(path);
  return f != nullptr ? f->mxfp8 : nullptr;
}
Mxfp8Widening mxfp8_default_widening(CpuPath) { return Mxfp8Widening::F16; }  // one widening here
std::vector<Mxfp8Widening> mxfp8_widenings(CpuPath) { return {Mxfp8Widening::F16}; }

BlockedTile mxfp8_direct_tile(CpuPath path, Mxfp8Widening) {
  const BlockedSimdKernels* f = simd_blocked_kernels(path);
  return f != nullptr ? f->mxfp8_tile : nullptr;
}
}  // namespace m3::matmul_detail

#endif

namespace m3::matmul_detail {
const char* mxfp8_widening_name(Mxfp8Widening widening) {
  switch (widening) {
    case Mxfp8Widening::F16: return "f16";
    case Mxfp8Widening::F32: return "f32";
  }
  return "?";
}
}  // namespace m3::matmul_detail
