// matmul: y[M, N] = x[M, K] · W[N, K]ᵀ, fp32 math on weights read in place (BF16/F16/F32).
//
// The summation order of every output is fixed (matmul_tile.h): it never depends on M, on which
// rows of x are present, on the thread count or on the blocking, so chunked prefill, decode and
// one-shot prefill give the same bits for the same token. This file packs x into the lane order,
// cuts the work into tiles and runs the tile kernels of the path the CPU supports.
#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "m3/error.h"
#include "base/cpu_dispatch.h"
#include "kernels/matmul_tile.h"

namespace m3 {

void matmul_ref(const float* x, int64_t M, const LinearWeight& w, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t n = 0; n < w.rows; ++n) {
    w.row_to_f32(n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      double s = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) s += double(x[m * w.cols + k]) * double(row[size_t(k)]);
      y[m * w.rows + n] = float(s);
    }
  }
}

namespace matmul_detail {
namespace {

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// ---- The generic path: plain C++ in the same lane order (multiply, then add). ----

// Block kb of a weight row as the two 16-lane vectors of the lane order; elements past K are 0.
void widen_block(DType t, const uint8_t* row, int64_t K, int64_t kb, float* w0, float* w1) {
  const int64_t k0 = kb * kBlock;
  const int64_t n = std::min<int64_t>(kBlock, K - k0);
  if (t == DType::F32) {
    float f[kBlock] = {};
    std::memcpy(f, row + 4 * k0, size_t(n) * 4);
    std::memcpy(w0, f, sizeof(float) * kLanes);
    std::memcpy(w1, f + kLanes, sizeof(float) * kLanes);
    return;
  }
  uint16_t h[kBlock] = {};  // +0 in both 16-bit formats
  std::memcpy(h, row + 2 * k0, size_t(n) * 2);
  for (int l = 0; l < kLanes; ++l) {
    if (t == DType::BF16) {
      w0[l] = bf16_to_f32(h[2 * l]);
      w1[l] = bf16_to_f32(h[2 * l + 1]);
    } else {
      w0[l] = f16_to_f32(h[l]);
      w1[l] = f16_to_f32(h[kLanes + l]);
    }
  }
}

// One multiply-add of the generic path. Where the build targets a fused multiply-add (FP_FAST_FMAF,
// e.g. -march=native) it is used explicitly, and the generic path then equals the SIMD paths bit for
// bit; for plain x86-64 it is a multiply, then an add (the compiler cannot fuse what the target
// lacks). Either way every tile computes each output the same way.
inline float madd(float a, float b, float c) {
#ifdef FP_FAST_FMAF
  return std::fma(a, b, c);
#else
  return c + a * b;
#endif
}

float reduce16(const float* a) {
  float s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; ++i) s8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

constexpr int kGenericMr = 4, kGenericNr = 4;

void generic_run(DType t, int mr, int nr, const TileArgs& a) {
  float acc[kGenericMr][kGenericNr][kLanes] = {};
  float w0[kLanes], w1[kLanes];
  for (int64_t kb = 0; kb * kBlock < a.K; ++kb)
    for (int j = 0; j < nr; ++j) {
      widen_block(t, a.w + j * a.w_stride, a.K, kb, w0, w1);
      for (int m = 0; m < mr; ++m) {
        const float* xb = a.x + m * a.x_stride + kb * a.x_block_stride;
        float* s = acc[m][j];
        for (int l = 0; l < kLanes; ++l) s[l] = madd(xb[l], w0[l], s[l]);
        for (int l = 0; l < kLanes; ++l) s[l] = madd(xb[kLanes + l], w1[l], s[l]);
      }
    }
  for (int m = 0; m < mr; ++m)
    for (int j = 0; j < nr; ++j) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j]);
}

void generic_run_panel(int mr, int nr, const PanelArgs& a) {
  float acc[kGenericMr][kGenericNr][kLanes];
  for (int m = 0; m < mr; ++m)
    for (int j = 0; j < nr; ++j)
      for (int l = 0; l < kLanes; ++l) acc[m][j][l] = a.resume ? a.lanes[(m * nr + j) * kLanes + l] : 0.0f;
  for (int64_t b = 0; b < a.blocks; ++b)
    for (int j = 0; j < nr; ++j) {
      const float* wb = a.panel + (b * nr + j) * kBlock;
      for (int m = 0; m < mr; ++m) {
        const float* xb = a.x + m * a.x_stride + b * a.x_block_stride;
        float* s = acc[m][j];
        for (int l = 0; l < kLanes; ++l) s[l] = madd(xb[l], wb[l], s[l]);
        for (int l = 0; l < kLanes; ++l) s[l] = madd(xb[kLanes + l], wb[kLanes + l], s[l]);
      }
    }
  for (int m = 0; m < mr; ++m)
    for (int j = 0; j < nr; ++j) {
      if (a.y != nullptr) a.y[m * a.y_stride + j * a.y_col_stride] = reduce16(acc[m][j]);
      else std::memcpy(a.lanes + (m * nr + j) * kLanes, acc[m][j], sizeof acc[m][j]);
    }
}

void generic_widen_rows(DType t, const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0, int64_t kb1,
                        float* panel) {
  for (int j = 0; j < rows; ++j)
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      float* out = panel + ((kb - kb0) * rows + j) * kBlock;
      widen_block(t, w + j * row_bytes, K, kb, out, out + kLanes);
    }
}

constexpr TileKernels kGeneric{"generic",          kGenericMr, {0, kGenericNr, kGenericNr, kGenericNr, kGenericNr},
                               &generic_run,       kGenericMr, kGenericNr,
                               &generic_run_panel, &generic_widen_rows};

// ---- Packing x into the lane order ----

// One row of x into the lane order (pairs or sequential), block b at out + b * block_stride.
// A block's even elements to out[0, 16) and its odd ones to out[16, 32) (the pair lane order).
// Four at a time with a shuffle where SSE is there: the scalar copy, one load and one store per
// element, was 7.7% of an AVX2 prefill of the small preset at 16K (perf, docs/BENCHMARKS.md §0k).
inline void deinterleave_block(const float* xb, float* ob) {
#if defined(__SSE2__)
  for (int l = 0; l < kLanes; l += 4) {
    const __m128 a = _mm_loadu_ps(xb + 2 * l), b = _mm_loadu_ps(xb + 2 * l + 4);
    _mm_storeu_ps(ob + l, _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm_storeu_ps(ob + kLanes + l, _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
#else
  for (int l = 0; l < kLanes; ++l) {
    ob[l] = xb[2 * l];
    ob[kLanes + l] = xb[2 * l + 1];
  }
#endif
}

void pack_row(const float* x, int64_t K, bool pairs, float* out, int64_t block_stride) {
  const int64_t full = K / kBlock;
  for (int64_t b = 0; b < full; ++b) {
    const float* xb = x + b * kBlock;
    float* ob = out + b * block_stride;
    if (pairs) {
      deinterleave_block(xb, ob);
    } else {
      std::memcpy(ob, xb, kBlock * sizeof(float));
    }
  }
  if (full * kBlock < K) {
    const float* xb = x + full * kBlock;
    float* ob = out + full * block_stride;
    std::fill_n(ob, kBlock, 0.0f);
    for (int64_t e = 0; e < K - full * kBlock; ++e) ob[pairs ? (e & 1) * kLanes + e / 2 : e] = xb[e];
  }
}

// Per-thread scratch that only grows (the packed x, the saved lanes of blocked tiles), 64-byte aligned.
// It is a cache, not state: every call overwrites what it reads.
float* thread_scratch(int slot, size_t floats) {
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t capacity = 0;
  };
  thread_local Buffer buffers[3];
  Buffer& b = buffers[slot];
  floats = std::max<size_t>(floats, 1);
  if (b.capacity < floats) {
    b.data.reset();
    b.data.reset(new float[floats + 16]);
    b.capacity = floats;
  }
  const uintptr_t p = reinterpret_cast<uintptr_t>(b.data.get());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t(63));
}

// AVX2 runs the hand-written direct tiles (decode, small batches: they hold an output's 16 lanes
// in two registers and read each weight once) with the Highway panel tiles (prefill: 3 x 4
// outputs per tile, one lane chunk at a time), each the faster one in `m3 bench matmul`
// (docs/BENCHMARKS.md §0g). AVX-512 runs the hand-written tiles, NEON and SVE the Highway ones.
// Every table gives the same bits.
const TileKernels* avx2_tiles() {
  const TileKernels* direct = avx2_tile_kernels();
  const TileKernels* simd = simd_tile_kernels(CpuPath::Avx2);
  if (direct == nullptr || simd == nullptr) return nullptr;  // not an x86 build
  static const TileKernels t{"avx2",          direct->max_mr,
                             {direct->nr_for_mr[0], direct->nr_for_mr[1], direct->nr_for_mr[2], direct->nr_for_mr[3],
                              direct->nr_for_mr[4]},
                             direct->run,     simd->panel_mr,
                             simd->panel_nr,  simd->run_panel,
                             simd->widen_rows};
  return &t;
}

const PathTables<TileKernels>& tile_tables() {
  static const PathTables<TileKernels> t{&kGeneric, avx2_tiles(), avx512_tile_kernels(),
                                          simd_tile_kernels(CpuPath::Neon), simd_tile_kernels(CpuPath::Sve)};
  return t;
}

const TileKernels& kernels_for(CpuPath path) {
  M3_CHECK(cpu_path_supported(path), "matmul: this CPU cannot run the ", cpu_path_name(path), " kernels");
  M3_CHECK(tile_tables().path_of(path) == path, "matmul: the ", cpu_path_name(path), " kernels are not in this build");
  return tile_tables().at(path);
}

// Rows of x per tile (also the tile height of the packed x) for a batch of mrows rows.
int tile_rows(const TileKernels& kern, const MatmulPlan& plan, int64_t mrows) {
  return int(std::min<int64_t>(plan.blocked ? kern.panel_mr : kern.max_mr, mrows));
}

// Weight rows [n0, n1) against the packed rows xp[0, mrows): y rows are mrows, N apart.
void run_range(const TileKernels& kern, const MatmulPlan& plan, const float* xp, int64_t mrows,
               const LinearWeight& w, float* y, int64_t n0, int64_t n1) {
  const int64_t N = w.rows, K = w.cols;
  const int64_t KB = (K + kBlock - 1) / kBlock, K32 = KB * kBlock;
  const int64_t row_bytes = w.row_bytes();
  const int mr = tile_rows(kern, plan, mrows);
  // The packed tile of x that starts at row m (a multiple of mr).
  auto x_tile = [&](int64_t m) { return xp + m * K32; };
  auto x_block_stride = [&](int64_t m) { return std::min<int64_t>(mr, mrows - m) * kBlock; };

  if (!plan.blocked || KB == 0) {
    // Direct tiles over all of K (decode). The hardware prefetcher keeps up with a few long
    // sequential streams but not with many short ones, so the range is cut into `streams`
    // contiguous runs of rows, and a tile takes one row from each run: every run is then read
    // front to back, row after row, while the tile still has independent FMA chains.
    const int streams =
        int(std::min<int64_t>({int64_t(kern.nr_for_mr[mr]), std::max<int64_t>(plan.streams, 1), n1 - n0}));
    const int64_t run = (n1 - n0) / streams;
    auto tile = [&](int64_t n, int nt, int64_t row_step) {
      for (int64_t m = 0; m < mrows; m += mr) {
        TileArgs a;
        a.x = x_tile(m);
        a.x_stride = kBlock;
        a.x_block_stride = x_block_stride(m);
        a.w = w.data + n * row_bytes;
        a.w_stride = row_step * row_bytes;
        a.K = K;
        a.y = y + m * N + n;
        a.y_stride = N;
        a.y_col_stride = row_step;
        const int rows_here = int(std::min<int64_t>(mr, mrows - m));
        if (plan.blocked_tile != nullptr) plan.blocked_tile(w, n, row_step, rows_here, nt, a);
        else kern.run(w.element(), rows_here, nt, a);
      }
    };
    for (int64_t r = 0; r < run; ++r) tile(n0 + r, streams, run);
    for (int64_t n = n0 + streams * run; n < n1; ++n) tile(n, 1, 1);  // fewer than `streams` rows left
    return;
  }

  // Panel tiles (a batch of rows): nr weight rows (row_step apart) are widened a chunk of kc_blocks
  // blocks at a time into an fp32 panel, which every mr-row tile of an mc-row block of x then runs
  // over before the next chunk; tiles save their lanes between chunks.
  const int pmr = mr, pnr = kern.panel_nr;
  const int64_t mc = round_up(std::max<int64_t>(plan.mc, 1), pmr);
  const int64_t nc = plan.weights_outer ? pnr : round_up(std::max<int64_t>(plan.nc, 1), pnr);
  const int64_t kcb = std::max<int64_t>(plan.kc_blocks, 1);
  const int64_t tiles_m = mc / pmr, tile_floats = int64_t(pmr) * pnr * kLanes;
  const int block_bytes = int(w.format->row_bytes(kBlock));  // bytes of the main tensor per 32 weights
  float* lanes = thread_scratch(1, size_t(mc * nc * kLanes));
  float* panel = thread_scratch(2, size_t(pnr * kcb * kBlock));

  // Blocks [kb0, kb0 + kcb) of the nt rows n, n + row_step, ... (lanes slot column jt) against x
  // rows [mc0, mc1). While the first tile runs, `next` (the source of the panel after this one,
  // nullptr if none) is prefetched, so that streaming weights from memory overlaps the arithmetic.
  auto chunk = [&](int64_t n, int nt, int64_t row_step, int64_t jt, int64_t mc0, int64_t mc1, int64_t kb0,
                   const uint8_t* next) {
    const int64_t kb1 = std::min(kb0 + kcb, KB);
    if (w.format->dense()) {
      kern.widen_rows(w.element(), w.data + n * row_bytes, row_step * row_bytes, nt, K, kb0, kb1, panel);
    } else {  // a blocked format's exact dequantization (SIMD, or the scalar code)
      (plan.fill != nullptr ? plan.fill : &scalar_panel_fill)(w, n, row_step, nt, kb0, kb1, panel);
    }
    for (int64_t m = mc0, it = 0; m < mc1; m += pmr, ++it) {
      PanelArgs a;
      a.x = x_tile(m) + kb0 * x_block_stride(m);
      a.x_stride = kBlock;
      a.x_block_stride = x_block_stride(m);
      a.panel = panel;
      a.blocks = kb1 - kb0;
      a.lanes = lanes + (jt * tiles_m + it) * tile_floats;
      a.resume = kb0 > 0;
      a.y = kb1 == KB ? y + m * N + n : nullptr;
      a.y_stride = N;
      a.y_col_stride = row_step;
      if (it == 0 && next != nullptr) {  // (prefetches never fault: overshooting the matrix is harmless)
        a.prefetch = next;
        a.prefetch_stride = row_step * row_bytes;
        a.prefetch_block_bytes = block_bytes;
      }
      kern.run_panel(int(std::min<int64_t>(pmr, mc1 - m)), nt, a);
    }
  };

  if (plan.weights_outer) {
    // Few rows of x (all in L2): every weight is read once, chunk after chunk along its row. As for
    // direct tiles, a panel takes one row from each of nr contiguous runs, so that the weights
    // arrive as nr long sequential streams.
    const int64_t run = (n1 - n0) / pnr;
    auto rows = [&](int64_t n, int nt, int64_t row_step, bool more) {
      for (int64_t mc0 = 0; mc0 < mrows; mc0 += mc)
        for (int64_t kb0 = 0; kb0 < KB; kb0 += kcb) {
          const bool last = kb0 + kcb >= KB;
          const uint8_t* next = !last ? w.data + n * row_bytes + (kb0 + kcb) * block_bytes
                                : more ? w.data + (n + 1) * row_bytes
                                       : nullptr;
          chunk(n, nt, row_step, 0, mc0, std::min(mc0 + mc, mrows), kb0, next);
        }
    };
    for (int64_t r = 0; r < run; ++r) rows(n0 + r, pnr, run, r + 1 < run);
    if (n0 + pnr * run < n1) rows(n0 + pnr * run, int(n1 - n0 - pnr * run), 1, false);
    return;
  }

  // Many rows: per chunk of K, the x block (mc rows) stays in L2 while every panel of an nc-row
  // block of weights passes through L1.
  for (int64_t nc0 = n0; nc0 < n1; nc0 += nc) {
    const int64_t nc1 = std::min(nc0 + nc, n1);
    for (int64_t mc0 = 0; mc0 < mrows; mc0 += mc) {
      const int64_t mc1 = std::min(mc0 + mc, mrows);
      for (int64_t kb0 = 0; kb0 < KB; kb0 += kcb)
        for (int64_t n = nc0, jt = 0; n < nc1; n += pnr, ++jt) {
          const uint8_t* next = n + pnr < n1 ? w.data + (n + pnr) * row_bytes + kb0 * block_bytes : nullptr;
          chunk(n, int(std::min<int64_t>(pnr, nc1 - n)), 1, jt, mc0, mc1, kb0, next);
        }
    }
  }
}

}  // namespace

void scalar_panel_fill(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                       float* panel) {
  const bool pairs = pair_lane_order(*w.format);
  float block[kBlock];
  for (int j = 0; j < rows; ++j)
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      float* out = panel + ((kb - kb0) * rows + j) * kBlock;
      const int64_t c1 = std::min<int64_t>((kb + 1) * kBlock, w.cols);
      w.format->dequantize_cols(w, n + j * row_step, kb * kBlock, c1, block);
      std::fill(block + (c1 - kb * kBlock), block + kBlock, 0.0f);
      for (int i = 0; i < kBlock; ++i) out[i] = block[pairs ? (i % kLanes) * 2 + i / kLanes : i];
    }
}

int direct_tile_prefetch_bytes() {
  // Measured on the two cores this project's machines have (docs/BENCHMARKS.md §0zc): on Zen 5
  // (48 KiB of L1D) 1-2 KiB ahead did best and 512 B clearly worse; on Zen 4 (32 KiB) 256-512 B
  // did best, and 1 KiB cost bf16 decode 4-20% (MXFP8 and affine: the same on AVX-512, 512 B
  // faster on AVX2). A tile streams 4 rows past an x of up to 24 KiB that it reloads from L1;
  // lines asked for too early in a small L1 are gone before they are read.
  static const int bytes = cpu_features().l1d_bytes >= 48 * 1024 ? 1024 : 512;
  return bytes;
}

bool pair_lane_order(const WeightFormat& format) {
  if (format.dense()) return format.element == DType::BF16;
  const std::optional<AffineParams> a = affine_params(format);
  return a && a->bits == 4;
}

MatmulPlan default_matmul_plan(CpuPath path, int64_t M, int64_t N, int64_t K) {
  // Measured on Zen 5 (docs: `m3 bench matmul`); the results do not depend on any of these.
  (void)path;
  MatmulPlan p;
  p.m_chunk = 256;
  const int64_t rows = std::min(M, p.m_chunk);
  // Up to a few dozen rows, direct tiles over all of K: each weight is streamed from memory once,
  // widened in registers, and found in cache by the other tiles of rows. More runs give a tile more
  // reuse of x, fewer keep the memory streams few: 4 for one row, else 6.
  p.streams = M <= 1 ? 4 : 6;
  // From then on, widening each weight chunk once into an fp32 panel pays for itself.
  p.blocked = rows >= 32;
  // While all of x fits in L2 with room to spare, each weight row is streamed once, front to back.
  // Room to spare is a quarter of a 1 MiB L2, as for the x blocks below: with x up to half of it
  // (256 rows at K = 512), the AVX2 panel tiles, which read each x tile twice (two 8-lane halves),
  // ran 12% slower on Zen 4 than through the blocked loop (docs/BENCHMARKS.md §0m).
  p.weights_outer = rows * round_up(K, kBlock) * int64_t(sizeof(float)) <= (256 << 10);
  p.kc_blocks = 32;  // 1024 of K: a 6-row fp32 panel is 24 KiB (L1), a 64-row x block 256 KiB (L2)
  p.mc = 64;
  p.nc = 48;
  (void)N;
  return p;
}

void matmul_run(CpuPath path, const MatmulPlan& plan, ThreadPool& pool, const float* x, const int32_t* rows,
                int64_t M, const LinearWeight& w, float* y) {
  const MatmulTarget one{&w, y};
  matmul_run_many(path, plan, pool, x, rows, M, std::span<const MatmulTarget>(&one, 1));
}

void matmul_run_many(CpuPath path, const MatmulPlan& plan, ThreadPool& pool, const float* x, const int32_t* rows,
                     int64_t M, std::span<const MatmulTarget> targets) {
  if (targets.empty()) return;
  const TileKernels& kern = kernels_for(tile_tables().path_of(path));
  const WeightFormat& f = *targets[0].w->format;
  const int64_t K = targets[0].w->cols;
  M3_CHECK(f.dense() || (f.dequantize_cols != nullptr && (plan.blocked || plan.blocked_tile != nullptr) &&
                         kBlock % f.weights_per_element == 0 && (kBlock % f.block_cols == 0 || f.block_cols % kBlock == 0)),
           "matmul: the tile kernels take dense weights, or blocked formats with dequantize_cols through panel tiles "
           "or their own direct tiles (32-column chunks), not ", f.name);
  int64_t N = 0;  // all the targets' rows, one after another
  for (const MatmulTarget& t : targets) {
    M3_CHECK(t.w->format == &f && t.w->cols == K, "matmul: weights run together share a format and a width, got ",
             t.w->format->name, " x ", t.w->cols, " with ", f.name, " x ", K);
    N += t.w->rows;
  }
  if (M <= 0 || N <= 0) return;
  const int64_t K32 = round_up(K, kBlock);
  const int64_t chunk = plan.m_chunk > 0 ? plan.m_chunk : M;
  const bool pairs = pair_lane_order(f);
  for (int64_t c0 = 0; c0 < M; c0 += chunk) {
    const int64_t mrows = std::min(chunk, M - c0);
    float* xp = thread_scratch(0, size_t(mrows * K32));
    // Tile-major: each tile of mr rows is one contiguous stream of blocks (mr rows side by side).
    const int mr = tile_rows(kern, plan, mrows);
    auto pack = [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        const int64_t tile = m / mr * mr, height = std::min<int64_t>(mr, mrows - tile);
        pack_row(x + (rows ? int64_t(rows[c0 + m]) : c0 + m) * K, K, pairs, xp + tile * K32 + (m - tile) * kBlock,
                 height * kBlock);
      }
    };
    if (mrows * K32 >= (1 << 16)) pool.parallel_for(mrows, pack, std::max<int64_t>(1, (1 << 15) / K32));
    else pack(0, mrows);

    // Contiguous ranges of weight rows per thread, each worth at least ~2^17 multiply-adds; a range
    // that spans two weights runs its part of each.
    const int64_t grain = std::max<int64_t>(kern.nr_for_mr[mr], (int64_t(1) << 17) / std::max<int64_t>(mrows * K32, 1));
    pool.parallel_for(N, [&](int64_t n0, int64_t n1) {
      int64_t first = 0;  // the first row of target t in [0, N)
      for (const MatmulTarget& t : targets) {
        const int64_t rows_t = t.w->rows, a = std::max(n0, first), b = std::min(n1, first + rows_t);
        if (a < b) run_range(kern, plan, xp, mrows, *t.w, t.y + c0 * rows_t, a - first, b - first);
        first += rows_t;
      }
    }, grain);
  }
}

const TileKernels& generic_tile_kernels() { return kGeneric; }

}  // namespace matmul_detail

namespace {

// The dense formats' plan on every path: the tile kernels above with the default plan.
matmul_detail::MatmulPlan dense_plan(CpuPath path, int64_t M, const LinearWeight& w) {
  return matmul_detail::default_matmul_plan(path, M, w.rows, w.cols);
}

void dense_matmul(CpuPath path, ThreadPool& pool, const float* x, const int32_t* rows, int64_t M,
                  const LinearWeight& w, float* y) {
  matmul_detail::matmul_run(path, dense_plan(path, M, w), pool, x, rows, M, w, y);
}

// Blocked formats (MXFP8, affine) on every path: their exact dequantization widens each chunk into
// the fp32 panel, and the path's panel tiles do the arithmetic, in the F32 lane order; small
// batches use the format's direct tiles instead, which widen in registers to the same values (the
// result does not depend on M).
matmul_detail::MatmulPlan blocked_plan(CpuPath path, int64_t M, const LinearWeight& w) {
  matmul_detail::MatmulPlan plan = matmul_detail::default_matmul_plan(path, M, w.rows, w.cols);
  const CpuPath tiles = matmul_detail::tile_tables().path_of(path);
  if (w.format == &mxfp8_format()) {
    plan.fill = matmul_detail::mxfp8_panel_fill(tiles);
    plan.blocked_tile = matmul_detail::mxfp8_direct_tile(tiles);
  } else if (const std::optional<AffineParams> a = affine_params(*w.format)) {
    plan.fill = matmul_detail::affine_panel_fill(tiles, a->bits);
    plan.blocked_tile = matmul_detail::affine_direct_tile(tiles, a->bits);
  }
  // Small batches (decode) take the direct tiles where the path has them, as dense weights do;
  // the rest, and paths without them, the panel tiles. Both give the same bits.
  if (plan.blocked_tile == nullptr) plan.blocked = true;
  if (plan.blocked) plan.blocked_tile = nullptr;
  return plan;
}

void blocked_matmul(CpuPath path, ThreadPool& pool, const float* x, const int32_t* rows, int64_t M,
                    const LinearWeight& w, float* y) {
  matmul_detail::matmul_run(path, blocked_plan(path, M, w), pool, x, rows, M, w, y);
}

struct KernelEntry {
  const WeightFormat* format;
  CpuPath path;
  MatmulKernel kernel;
};

// Append-only and read on every matmul: readers scan the first `count` entries without a lock
// (an entry is written before count is published), writers take the mutex.
struct KernelRegistry {
  static constexpr int kCapacity = 256;
  std::mutex mu;
  std::array<KernelEntry, kCapacity> entries{};
  std::atomic<int> count{0};
  KernelRegistry() {
    int n = 0;
    for (const WeightFormat* f : {&bf16_format(), &f16_format(), &f32_format()})
      for (CpuPath p : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512}) entries[size_t(n++)] = {f, p, &dense_matmul};
    std::vector<const WeightFormat*> blocked = {&mxfp8_format()};
    for (int bits : {4, 8})
      for (int group : {32, 64, 128}) blocked.push_back(affine_format(bits, group));
    for (const WeightFormat* f : blocked)
      for (CpuPath p : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512}) entries[size_t(n++)] = {f, p, &blocked_matmul};
    // NEON and SVE: the generic entries, which run the path's Highway tiles (tile_tables), the
    // blocked formats through their exact scalar dequantization into the panel.
    count.store(n, std::memory_order_release);
  }
};
KernelRegistry& kernel_registry() {
  static KernelRegistry r;
  return r;
}

void run_matmul(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M, const LinearWeight& w, float* y) {
  const CpuPath path = cpu_active_path();
  const MatmulKernel k = find_matmul_kernel(*w.format, path);
  M3_CHECK(k != nullptr, "matmul: no kernel for weight format ", w.format->name, " on the ", cpu_path_name(path),
           " path");
  k(path, pool, x, rows, M, w, y);
}

}  // namespace

void register_matmul_kernel(const WeightFormat& format, CpuPath path, MatmulKernel kernel) {
  KernelRegistry& r = kernel_registry();
  std::lock_guard<std::mutex> lk(r.mu);
  const int n = r.count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i)
    M3_CHECK(!(r.entries[size_t(i)].format == &format && r.entries[size_t(i)].path == path), "matmul: a ",
             cpu_path_name(path), " kernel for ", format.name, " is registered already");
  M3_CHECK(n < KernelRegistry::kCapacity, "matmul: more than ", KernelRegistry::kCapacity, " kernels registered");
  r.entries[size_t(n)] = {&format, path, kernel};
  r.count.store(n + 1, std::memory_order_release);
}

MatmulKernel find_matmul_kernel(const WeightFormat& format, CpuPath path) {
  const KernelRegistry& r = kernel_registry();
  const int n = r.count.load(std::memory_order_acquire);
  // The best registered path at or below the asked one in its chain (base/cpu_features.h).
  for (CpuPath p = path;; p = cpu_path_below(p)) {
    for (int i = 0; i < n; ++i) {
      const KernelEntry& e = r.entries[size_t(i)];
      if (e.format == &format && e.path == p) return e.kernel;
    }
    if (p == CpuPath::Generic) return nullptr;
  }
}

// The dense tile kernels' path.
const char* matmul_kernel_name() { return cpu_path_name(matmul_detail::tile_tables().path_of(cpu_active_path())); }

const char* mxfp8_widening_name() {
  switch (cpu_active_path()) {
    case CpuPath::Generic: return "tables";
    case CpuPath::Avx2:
    case CpuPath::Avx512:
      return matmul_detail::mxfp8_widening_name(matmul_detail::mxfp8_default_widening(cpu_active_path()));
    default: return "f16";  // NEON and SVE
  }
}

void matmul(ThreadPool& pool, const float* x, int64_t M, const LinearWeight& w, float* y) {
  run_matmul(pool, x, nullptr, M, w, y);
}

void matmul_gather(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M, const LinearWeight& w,
                   float* y) {
  run_matmul(pool, x, rows, M, w, y);
}

void matmul_many(ThreadPool& pool, const float* x, const int32_t* rows, int64_t M,
                 std::span<const MatmulTarget> targets) {
  if (targets.empty()) return;
  const CpuPath path = cpu_active_path();
  const LinearWeight& w0 = *targets[0].w;
  const MatmulKernel k = find_matmul_kernel(*w0.format, path);
  bool together = targets.size() > 1 && (k == &dense_matmul || k == &blocked_matmul);
  for (const MatmulTarget& t : targets) together = together && t.w->format == w0.format && t.w->cols == w0.cols;
  if (!together) {  // one at a time: a format's own kernel, or weights that cannot share x's packing
    for (const MatmulTarget& t : targets) run_matmul(pool, x, rows, M, *t.w, t.y);
    return;
  }
  // The plan depends on M and the format (N is not used), so one plan serves every target.
  const matmul_detail::MatmulPlan plan = k == &dense_matmul ? dense_plan(path, M, w0) : blocked_plan(path, M, w0);
  matmul_detail::matmul_run_many(path, plan, pool, x, rows, M, targets);
}

}  // namespace m3
