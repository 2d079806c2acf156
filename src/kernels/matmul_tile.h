#pragma once
// Internals shared by matmul.cpp and the tile kernels (matmul_avx512.cpp, matmul_avx2.cpp, and
// matmul_simd.cpp's Highway tiles for AVX2, NEON and SVE).
//
// The summation order, which every path keeps so that results never depend on the batch size M,
// on which rows are present, on the thread count or on how the work is blocked:
//   * K is cut into blocks of 32. Each output y[m,n] owns 16 fp32 lanes. Block b adds, per lane l,
//     first x[p0(l)]·w[p0(l)] and then x[p1(l)]·w[p1(l)] (one FMA each, in that order, blocks in
//     increasing order), where for BF16 weights p0(l) = 32b+2l, p1(l) = 32b+2l+1 (the even and odd
//     elements: a BF16 pair widens to fp32 with a shift and a mask) and for 4-bit affine weights
//     (a byte holds elements 2l and 2l+1: one widening, then a mask and a shift, where the
//     sequential order took two more shuffles per block; docs/BENCHMARKS.md §0i), and for the
//     other formats p0(l) = 32b+l, p1(l) = 32b+16+l. Elements past K count as 0·0.
//   * The 16 lanes are then summed by a fixed tree: s8[i] = a[i]+a[i+8], s4[i] = s8[i]+s8[i+4],
//     s2[i] = s4[i]+s4[i+2], y = s2[0]+s2[1].
// x is first packed into that lane order (zero-padded to a multiple of 32), so every kernel reads
// x and W with plain vector loads. The AVX-512 and AVX2 kernels both use FMA and give bit-identical
// results (AVX2 holds the 16 lanes in two registers). The generic path multiplies and adds
// separately on plain x86-64 (no FMA instruction there), so it agrees with them only to rounding;
// built for a target with FMA (FP_FAST_FMAF) it fuses too and agrees bit for bit.
// Panel tiles stop after a chunk of blocks and resume from their saved lanes: blocking over K
// changes nothing either.
#include <cstdint>
#include <span>
#include <vector>

#include "base/cpu_features.h"
#include "m3/dtype.h"
#include "base/thread_pool.h"
#include "format/linear_weight.h"
#include "kernels/matmul.h"

namespace m3::matmul_detail {

constexpr int kBlock = 32;  // K elements per block

// Whether the weights of `format` take the pair lane order (p0(l) = 32b+2l, above), else the
// sequential one: x is packed, and blocked formats fill their panels, in the weights' order.
bool pair_lane_order(const WeightFormat& format);
constexpr int kLanes = 16;  // fp32 partial sums per output

// Packed x is tile-major: for each tile of rows, block after block, the tile's rows side by side
// (32 floats each). A tile reads row m of block b at x + b * x_block_stride + m * x_stride.
//
// Two kinds of tile, same arithmetic:
//  * direct tiles widen the weights in registers as they stream them, over all of K (decode and
//    small batches: each weight is read from memory once; further tiles of rows find it in cache);
//  * panel tiles read weights that widen_rows already widened into a small fp32 panel in L1
//    (prefill: the panel is reused by every mr-row tile of an mc-row block of x, so the widening
//    leaves the inner loop, which is then nothing but loads and FMAs).

// A direct tile: y[m, j] for mr rows of packed x and nr weight rows, over all of K.
struct TileArgs {
  const float* x = nullptr;    // packed x of the tile (block 0)
  int64_t x_stride = 0;        // floats between rows of a block (32)
  int64_t x_block_stride = 0;  // floats between blocks (32 * rows of the tile)
  const uint8_t* w = nullptr;  // the tile's first weight row; rows w_stride bytes apart (any distance)
  int64_t w_stride = 0;
  int64_t K = 0;               // row length: block K/32 is partial when K % 32 != 0
  float* y = nullptr;          // y[m * y_stride + j * y_col_stride] = output (m, j)
  int64_t y_stride = 0;
  int64_t y_col_stride = 1;
};

// A panel tile: like a direct tile, but the weights of blocks [0, blocks) come widened, block-major:
// panel[(b * nr + j) * 32 + i] is element i of the lane order (pass 0 then pass 1) of block b, row j.
struct PanelArgs {
  const float* x = nullptr;  // packed x of the tile at the panel's first block
  int64_t x_stride = 0;
  int64_t x_block_stride = 0;
  const float* panel = nullptr;
  int64_t blocks = 0;
  float* lanes = nullptr;  // saved lanes [mr][nr][16]: read when resume, written unless y is set
  bool resume = false;     // start from `lanes` instead of zero
  float* y = nullptr;      // when set (last chunk): reduce and write as for direct tiles
  int64_t y_stride = 0;
  int64_t y_col_stride = 1;
  // When set: weight bytes to pull toward the cache while computing (the next panel's source), one
  // `prefetch_block_bytes` block per panel row per block, rows prefetch_stride bytes apart.
  const uint8_t* prefetch = nullptr;
  int64_t prefetch_stride = 0;
  int prefetch_block_bytes = 0;
};

// A path's kernels. Direct tiles exist for mr <= max_mr and nr <= nr_for_mr[mr]; panel tiles for
// mr <= panel_mr and nr <= panel_nr.
struct TileKernels {
  const char* name;
  int max_mr;
  int nr_for_mr[5];  // index 1..max_mr; non-increasing
  void (*run)(DType dtype, int mr, int nr, const TileArgs& args);
  int panel_mr, panel_nr;
  void (*run_panel)(int mr, int nr, const PanelArgs& args);
  // Widens blocks [kb0, kb1) of `rows` weight rows (row_bytes apart, K elements each) into a
  // panel with rows j = 0..rows-1 (the layout of PanelArgs, nr = rows).
  void (*widen_rows)(DType dtype, const uint8_t* w, int64_t row_bytes, int rows, int64_t K, int64_t kb0,
                     int64_t kb1, float* panel);
};

// How far ahead along each weight row (bytes) the x86 direct tiles (decode) ask for the weights
// they stream: a distance that suits the core's L1 data cache. Read once.
int direct_tile_prefetch_bytes();

// nullptr when the binary was built for a target without that path (non-x86). The AVX2 table
// holds direct tiles only (no panel tiles, no widen_rows).
const TileKernels* avx512_tile_kernels();
const TileKernels* avx2_tile_kernels();
// The Highway tiles of `path` (matmul_simd.cpp: AVX2, NEON, SVE); nullptr where the build has none.
const TileKernels* simd_tile_kernels(CpuPath path);
const TileKernels& generic_tile_kernels();

// Widens blocks [kb0, kb1) of the weight rows n, n + row_step, ... (`rows` of them) of a blocked
// format into a panel (the layout of PanelArgs, nr = rows), exactly as the format's
// dequantize_cols: one format's SIMD dequantization on one path.
using PanelFill = void (*)(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                           float* panel);
// The fill of any blocked format through its scalar dequantize_cols, block by block into the lane
// order: the generic path's, and the reference the SIMD fills give the bits of.
void scalar_panel_fill(const LinearWeight& w, int64_t n, int64_t row_step, int rows, int64_t kb0, int64_t kb1,
                       float* panel);
// MXFP8's panel fill on `path` (matmul_mxfp8.cpp); nullptr where it has none (scalar_panel_fill is
// used).
PanelFill mxfp8_panel_fill(CpuPath path);
// The affine formats' panel fill for `bits` (4 or 8) on `path` (matmul_affine.cpp); nullptr where
// it has none.
PanelFill affine_panel_fill(CpuPath path, int bits);

// A direct tile of a blocked format (matmul_blocked_tile.h, matmul_blocked_simd.cpp):
// TileKernels::run for the weight rows n, n + row_step, ... (nr of them) of w, each 32-block
// widened in registers to the values its panel fill writes (the same bits as the panel path).
using BlockedTile = void (*)(const LinearWeight& w, int64_t n, int64_t row_step, int mr, int nr, const TileArgs& a);
// How the AVX2 and AVX-512 MXFP8 direct tiles widen E4M3 codes (matmul_mxfp8.cpp); both give the
// same bits. F16: through the F16 conversion. F32: straight to fp32 bits, without the conversions,
// but E4M3 subnormals become fp32 subnormal operands, so only for cores that multiply those
// without a microcode assist (CpuFeatures::fast_subnormal_operands). NEON and SVE have one widening.
enum class Mxfp8Widening { F16, F32 };
// The widening the direct tiles use on `path` (M3_MXFP8_WIDENING=f16|f32 forces one, for
// side-by-side measurements), and every one the path has (for tests and benchmarks).
Mxfp8Widening mxfp8_default_widening(CpuPath path);
std::vector<Mxfp8Widening> mxfp8_widenings(CpuPath path);
const char* mxfp8_widening_name(Mxfp8Widening widening);  // "f16", "f32"
BlockedTile mxfp8_direct_tile(CpuPath path, Mxfp8Widening widening);
inline BlockedTile mxfp8_direct_tile(CpuPath path) { return mxfp8_direct_tile(path, mxfp8_default_widening(path)); }
BlockedTile affine_direct_tile(CpuPath path, int bits);

// The blocked formats' panel fills and direct tiles from one Highway source
// (matmul_blocked_simd.cpp), the same values as the hand-written ones; the functions above hand
// them to NEON and SVE. nullptr for a path the build has no Highway copy for.
struct BlockedSimdKernels {
  PanelFill mxfp8, affine4, affine8;
  BlockedTile mxfp8_tile, affine4_tile, affine8_tile;
};
const BlockedSimdKernels* simd_blocked_kernels(CpuPath path);

// How matmul cuts the work; tests force small blocks to check that blocking changes nothing.
struct MatmulPlan {
  bool blocked = false;   // false: direct tiles over all of K (small M); true: panel tiles
  int streams = 4;        // direct tiles: contiguous runs of weight rows read side by side
  int64_t mc = 0;         // rows of x per block (rounded up to a multiple of the tile's mr)
  int64_t nc = 0;         // weight rows per block (rounded up to a multiple of the tile's nr)
  int64_t kc_blocks = 0;  // 32-blocks of K per block
  bool weights_outer = false;  // per weight panel all K chunks in turn (else per K chunk all panels)
  int64_t m_chunk = 0;    // rows of x packed and run at once (bounds the packed copy); 0: all
  PanelFill fill = nullptr;  // blocked formats: the panel fill (nullptr: the format's dequantize_cols)
  BlockedTile blocked_tile = nullptr;  // blocked formats: the direct tiles (needed when !blocked)
};

MatmulPlan default_matmul_plan(CpuPath path, int64_t M, int64_t N, int64_t K);

// The whole product on one path with one plan: y[i] = x[rows ? rows[i] : i] · Wᵀ.
void matmul_run(CpuPath path, const MatmulPlan& plan, ThreadPool& pool, const float* x, const int32_t* rows,
                int64_t M, const LinearWeight& w, float* y);
// The same for several weights of one format and width against the same x: x is packed once and
// the pool makes one pass over all their rows (each result as matmul_run gives it).
void matmul_run_many(CpuPath path, const MatmulPlan& plan, ThreadPool& pool, const float* x, const int32_t* rows,
                     int64_t M, std::span<const MatmulTarget> targets);

}  // namespace m3::matmul_detail
