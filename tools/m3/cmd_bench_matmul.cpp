// m3 bench matmul: the weight-matmul kernels against their bounds, measured side by side in one run.
//   * memory bandwidth and fp32 FMA peak, from base/machine_bounds (as every bench subcommand);
//   * matmul y[M,N] = x[M,K]·W[N,K]ᵀ with bf16 weights for M = 1..512 at model-sized shapes.
// Small M is bounded by streaming the weights (bytes / bandwidth), large M by the FMA peak
// (flops / peak); each row prints the larger of the two bounds and how close the kernel gets.
// Weights are cycled through enough copies that every repetition reads them from DRAM, as decode
// does, each copy on huge pages as the engine places a checkpoint's (base/mapped_file.h).
// Medians of --reps repetitions. M3_CPU=avx2|generic measures the other kernel paths.
// --kernels (or --fills; blocked formats) also times each path's kernels alone on one thread,
// cache-resident: the panel fills (the scalar dequantization, each SIMD path's fill and the
// Highway one, which is what NEON and SVE run) and the decode kernels at M = 1 (the panel path,
// the direct tiles and their Highway copy).
// Bench progress goes to stderr; the report (-o md|csv|json|jsonl) to stdout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/mapped_file.h"
#include "m3/dtype.h"
#include "m3/error.h"
#include "base/machine_bounds.h"
#include "base/thread_pool.h"
#include "bench_report.h"
#include "bench_util.h"
#include "commands.h"
#include "usage.h"
#include "format/quantize.h"
#include "format/weight_format.h"
#include "kernels/matmul.h"
#include "kernels/matmul_tile.h"

namespace m3::cli {

void register_bench_matmul(CLI::App* bench);

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- the matmul table ----

struct MatmulBenchOptions {
  int threads = 0;
  int reps = 7;
  std::string ms = "1,2,4,8,16,64,512";
  std::string shapes = "4096x4096,6144x3072";
  int64_t bandwidth_mib = 1024;
  int64_t stream_mib = 256;  // weight copies cycled per shape, so that each repetition reads DRAM
  std::string clock = "wall";
  std::string output = "md";
  std::string weights = "bf16";  // or any format quantize_row writes (mxfp8, affine4, ...)
  bool skip_bounds = false;
  bool fills = false;
};

// ---- the panel fills of a blocked format ----

// Every fill of `format` this machine runs: the scalar code, then each SIMD path's own fill and,
// where the path also has a Highway copy (AVX2), that one.
std::vector<std::pair<std::string, matmul_detail::PanelFill>> panel_fills(const WeightFormat& format) {
  std::vector<std::pair<std::string, matmul_detail::PanelFill>> fills{{"scalar", &matmul_detail::scalar_panel_fill}};
  const std::optional<AffineParams> a = affine_params(format);
  for (CpuPath path : {CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!cpu_path_supported(path)) continue;
    const matmul_detail::PanelFill own =
        a ? matmul_detail::affine_panel_fill(path, a->bits) : matmul_detail::mxfp8_panel_fill(path);
    const matmul_detail::BlockedSimdKernels* h = matmul_detail::simd_blocked_kernels(path);
    const matmul_detail::PanelFill highway = h == nullptr ? nullptr : !a ? h->mxfp8 : a->bits == 4 ? h->affine4 : h->affine8;
    if (own != nullptr) fills.emplace_back(own == highway ? std::string(cpu_path_name(path)) + " (Highway)" : cpu_path_name(path), own);
    if (highway != nullptr && highway != own) fills.emplace_back(std::string(cpu_path_name(path)) + " (Highway)", highway);
  }
  return fills;
}

// ns per 32 weights of each fill over all of w, 6 rows and 32 blocks per panel (the planner's
// panel shape), the median of `reps` passes on one thread.
void time_fills(const LinearWeight& w, int reps, const BenchClock& clock, BenchReport& report) {
  const int64_t blocks = w.cols / 32, rows = 6, chunk = 32;
  std::vector<float> buf(size_t(rows * chunk * 32) + 16);
  float* panel = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
  report.table("Panel fills of " + std::string(w.format->name) + " alone (one thread, cache-resident), median",
               {{"fill", "fill"}, {"ns_per_32", "ns per 32 weights"}, {"vs_scalar", "× scalar"}});
  double scalar_ns = 0;
  for (const auto& [name, fill] : panel_fills(*w.format)) {
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      const double t0 = clock.now();
      for (int64_t n = 0; n < w.rows; n += rows)
        for (int64_t kb = 0; kb < blocks; kb += chunk)
          fill(w, n, 1, int(std::min(rows, w.rows - n)), kb, std::min(kb + chunk, blocks), panel);
      if (r > 0) times.push_back(clock.since(t0));
    }
    const double ns = median(times) * 1e9 / double(w.rows * blocks);
    if (scalar_ns == 0) scalar_ns = ns;
    report.row({name, Cell(ns, "%.2f"), Cell(scalar_ns / ns, "%.1f")});
  }
}

// ---- the direct tiles of a blocked format (decode) ----

// Every way this machine runs a blocked format at M = 1: each SIMD path's panel path (its fill,
// then its panel tiles), its own direct tiles and, where the path also has a Highway copy of them
// (AVX2: the code NEON and SVE run), that one; MXFP8 on AVX2 and AVX-512 with each widening the CPU runs.
struct DecodeKernel {
  std::string name;
  CpuPath path;
  matmul_detail::BlockedTile tile;  // nullptr: the panel path
};

std::vector<DecodeKernel> decode_kernels(const WeightFormat& format) {
  std::vector<DecodeKernel> out;
  const std::optional<AffineParams> a = affine_params(format);
  for (CpuPath path : {CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!cpu_path_supported(path)) continue;
    const matmul_detail::BlockedTile own =
        a ? matmul_detail::affine_direct_tile(path, a->bits) : matmul_detail::mxfp8_direct_tile(path);
    const matmul_detail::BlockedSimdKernels* h = matmul_detail::simd_blocked_kernels(path);
    const matmul_detail::BlockedTile highway = h == nullptr ? nullptr
                                               : !a         ? h->mxfp8_tile
                                               : a->bits == 4 ? h->affine4_tile
                                                              : h->affine8_tile;
    const std::string p = cpu_path_name(path);
    out.push_back({p + " panel path", path, nullptr});
    if (own != nullptr) out.push_back({p + (own == highway ? " direct (Highway)" : " direct"), path, own});
    if (!a && (path == CpuPath::Avx512 || path == CpuPath::Avx2)) {  // MXFP8: the other widenings too (same bits)
      const matmul_detail::Mxfp8Widening mine = matmul_detail::mxfp8_default_widening(path);
      out.back().name += std::string(" (") + matmul_detail::mxfp8_widening_name(mine) + " widening, this CPU's)";
      for (matmul_detail::Mxfp8Widening other : matmul_detail::mxfp8_widenings(path))
        if (other != mine)
          out.push_back({p + " direct (" + matmul_detail::mxfp8_widening_name(other) + " widening)", path,
                         matmul_detail::mxfp8_direct_tile(path, other)});
    }
    if (highway != nullptr && highway != own) out.push_back({p + " direct (Highway)", path, highway});
  }
  return out;
}

// ns per 32 weights of each at M = 1 over all of w (cache-resident after the first pass), the
// median of `reps` passes on one thread.
void time_decode_kernels(const LinearWeight& w, int reps, const BenchClock& clock, BenchReport& report) {
  ThreadPool one(1);
  std::vector<float> x(size_t(w.cols)), y(size_t(w.rows));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(rng);
  report.table("Decode kernels of " + std::string(w.format->name) + " at M = 1 (one thread, cache-resident), median",
               {{"kernel", "kernel"}, {"ns_per_32", "ns per 32 weights"}, {"gflops", "GFLOP/s"}});
  for (const DecodeKernel& k : decode_kernels(*w.format)) {
    matmul_detail::MatmulPlan plan = matmul_detail::default_matmul_plan(k.path, 1, w.rows, w.cols);
    plan.blocked = k.tile == nullptr;
    plan.blocked_tile = k.tile;
    const std::optional<AffineParams> a = affine_params(*w.format);
    plan.fill = a ? matmul_detail::affine_panel_fill(k.path, a->bits) : matmul_detail::mxfp8_panel_fill(k.path);
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      const double t0 = clock.now();
      matmul_detail::matmul_run(k.path, plan, one, x.data(), nullptr, 1, w, y.data());
      if (r > 0) times.push_back(clock.since(t0));
    }
    const double t = median(times);
    report.row({k.name, Cell(t * 1e9 * 32 / double(w.rows * w.cols), "%.2f"),
                Cell(2.0 * double(w.rows * w.cols) / t / 1e9)});
  }
}

struct Row {
  std::string shape;
  int64_t M, N, K;
  double seconds, gflops, gbs, bound_seconds;
  bool compute_bound;
};

void run_bench(const MatmulBenchOptions& o) {
  std::vector<std::string> shapes;
  for (size_t i = 0; i <= o.shapes.size();) {
    const size_t j = std::min(o.shapes.find(',', i), o.shapes.size());
    shapes.push_back(o.shapes.substr(i, j - i));
    i = j + 1;
  }
  std::vector<std::pair<int64_t, int64_t>> nks;
  for (const std::string& shape : shapes) {
    long long n = 0, k = 0;
    char extra = 0;
    M3_CHECK(std::sscanf(shape.c_str(), "%lldx%lld%c", &n, &k, &extra) == 2 && n > 0 && k > 0,
             "bench matmul: shape '", shape, "' is not NxK (output x input features), e.g. 4096x4096");
    nks.emplace_back(n, k);
  }
  const std::vector<long long> ms = parse_int_list(o.ms, "bench matmul --m");
  for (long long M : ms) M3_CHECK(M > 0, "bench matmul --m: batch sizes must be positive");
  ThreadPool pool(o.threads);
  M3_CHECK(o.clock == "wall" || o.clock == "cpu", "bench matmul: --clock is wall or cpu, not '", o.clock, "'");
  const BenchClock clock{o.clock == "cpu", pool.size()};
  const int reps = std::max(1, o.reps);
  // bytes/s and flop/s (machine_bounds reports GB/s and GFLOP/s, best of its repetitions). A best
  // of 9 is settled, and a kernel timed cache-resident wants thousands of repetitions, which the
  // bounds (tens of ms each) must not take.
  const int bound_reps = std::min(reps, 9);
  const ReadBandwidth reads =
      o.skip_bounds ? ReadBandwidth{} : measure_read_patterns(pool, size_t(o.bandwidth_mib) << 20, bound_reps, clock);
  const double bw = 1e9 * reads.best();
  const double peak = o.skip_bounds ? 0.0 : 1e9 * measure_fma_peak(pool, bound_reps, clock);
  BenchReport report(report_format_of(o.output));
  report.machine_facts(pool.size(), {bw / 1e9, peak / 1e9});
  if (!o.skip_bounds) {  // the bound is the faster of the two read patterns (base/machine_bounds.h)
    report.fact("read_one_stream_gbs", reads.one_stream);
    report.fact("read_four_streams_gbs", reads.streams);
  }
  report.fact("weights", o.weights);
  const WeightFormat* format = o.weights == "affine4"   ? affine_format(4, 64)
                               : o.weights == "affine8" ? affine_format(8, 64)
                                                        : find_weight_format(o.weights);
  M3_CHECK(format != nullptr && can_quantize_to(*format), "bench matmul: --weights: unknown format ", o.weights);
  report.fact("reps", reps);
  report.fact("clock", clock.cpu ? "cpu" : "wall");

  std::vector<Row> rows;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t si = 0; si < shapes.size(); ++si) {
    const std::string& shape = shapes[si];
    const auto [N, K] = nks[si];
    M3_CHECK(K % format->block_cols == 0 && K % format->weights_per_element == 0, "bench matmul: ", format->name,
             " needs K a multiple of ", format->block_cols, ", got ", K);
    // Per copy: the main tensor, then each side tensor (quantized from the same random rows).
    std::vector<size_t> side_at, side_row;
    size_t wbytes = size_t(N * format->row_bytes(K));
    for (const SideTensorSpec& sd : format->side) {
      side_row.push_back(size_t(K / format->block_cols * sd.per_block) * dtype_size(sd.dtype));
      side_at.push_back(wbytes);
      wbytes += size_t(N) * side_row.back();
    }
    const int copies = int(std::max<int64_t>(1, (o.stream_mib << 20) / int64_t(wbytes) + 1));
    std::vector<HugePageBuffer> weights;
    weights.reserve(size_t(copies));
    for (int c = 0; c < copies; ++c) {
      const HugePageBuffer& wc = weights.emplace_back(wbytes);
      std::vector<float> row(static_cast<size_t>(K));
      std::vector<uint8_t*> side(format->side.size());
      for (int64_t r = 0; r < N; ++r) {
        for (float& v : row) v = 0.02f * dist(rng);
        for (size_t i = 0; i < side.size(); ++i) side[i] = wc.data() + side_at[i] + size_t(r) * side_row[i];
        quantize_row(*format, row.data(), K, wc.data() + r * format->row_bytes(K), side.data());
      }
    }
    if (o.fills && si == 0) {
      M3_CHECK(!format->dense(), "bench matmul --kernels: ", format->name, " is dense (the blocked formats have fills and direct tiles)");
      LinearWeight w;
      w.format = format;
      w.data = weights[0].data();
      for (size_t i = 0; i < side_at.size(); ++i) w.side[i] = w.data + side_at[i];
      w.rows = N;
      w.cols = K;
      time_fills(w, reps, BenchClock{clock.cpu, 1}, report);
      time_decode_kernels(w, reps, BenchClock{clock.cpu, 1}, report);
    }
    for (const long long M : ms) {
      std::vector<float> x(size_t(M * K)), y(size_t(M * N));
      for (float& v : x) v = dist(rng);
      std::vector<double> times;
      for (int r = 0; r < reps + 1; ++r) {
        const uint8_t* data = weights[size_t(r % copies)].data();
        LinearWeight w;
        w.format = format;
        w.data = data;
        for (size_t i = 0; i < side_at.size(); ++i) w.side[i] = data + side_at[i];
        w.rows = N;
        w.cols = K;
        const double t0 = clock.now();
        matmul(pool, x.data(), M, w, y.data());
        if (r > 0) times.push_back(clock.since(t0));  // the first run warms up
      }
      Row row{shape, M, N, K, median(times), 0, 0, 0, false};
      const double flops = 2.0 * double(M) * double(N) * double(K);
      const double bytes = double(wbytes) + 4.0 * double(M * K + M * N);
      row.gflops = flops / row.seconds / 1e9;
      row.gbs = bytes / row.seconds / 1e9;
      if (!o.skip_bounds) {
        const double t_mem = bytes / bw, t_fma = flops / peak;
        row.compute_bound = t_fma > t_mem;
        row.bound_seconds = std::max(t_mem, t_fma);
      }
      rows.push_back(row);
      std::fprintf(stderr, "  %s M=%lld: %.3f ms\n", shape.c_str(), static_cast<long long>(M), row.seconds * 1e3);
    }
  }

  report.table("Weight matmul y = x·Wᵀ (" + o.weights + " W), median of the repetitions, against the larger of its two bounds",
               {{"shape", "shape N×K"}, {"m", "M"}, {"time_ms", "time ms"}, {"gflops", "GFLOP/s"}, {"gbs", "GB/s"},
                {"bound", ""}, {"of_bound", "% of bound"}});
  for (const Row& r : rows)
    report.row({r.shape, (long long)r.M, Cell(r.seconds * 1e3, "%.3f"), Cell(r.gflops), Cell(r.gbs),
                o.skip_bounds ? "–" : r.compute_bound ? "FMA peak" : "bandwidth",
                o.skip_bounds ? Cell("–") : Cell(100.0 * r.bound_seconds / r.seconds, "%.0f%%")});
  report.finish();
}

}  // namespace

void register_bench_matmul(CLI::App* bench) {
  auto opts = std::make_shared<MatmulBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "matmul", "Weight matmul throughput (bf16, MXFP8 or affine) for M = 1..512 against measured bandwidth and FMA peak");
  cmd->add_option("-t,--threads", opts->threads, "Threads (default: one per usable CPU)");
  cmd->add_option("-r,--reps", opts->reps, "Repetitions (median)")->capture_default_str()->check(Positive());
  cmd->add_option("-m,--m", opts->ms, "Batch sizes M (rows of x), comma-separated")->capture_default_str();
  cmd->add_option("-s,--shapes", opts->shapes, "Weight shapes NxK (out x in), comma-separated")->capture_default_str();
  cmd->add_option("--bandwidth-mib", opts->bandwidth_mib, "Buffer of the bandwidth measurement, MiB")
      ->capture_default_str()
      ->check(Positive());
  cmd->add_option("--stream-mib", opts->stream_mib, "Weight copies cycled per shape, MiB (0: one copy, may stay cached)")
      ->capture_default_str();
  cmd->add_option("--clock", opts->clock, "wall, or cpu: process CPU time / threads (on a busy machine)")
      ->capture_default_str();
  cmd->add_flag("--skip-bounds", opts->skip_bounds, "Do not measure bandwidth and FMA peak");
  cmd->add_flag("--kernels,--fills", opts->fills,
                "Blocked formats: also time each path's kernels alone on the first shape, one thread: the panel "
                "fills (the scalar code, each SIMD path's, and the Highway one that NEON and SVE run) and the "
                "decode kernels at M = 1 (panel path, direct tiles, their Highway copy)");
  cmd->add_option("--weights", opts->weights,
                  "bf16, mxfp8 (the official release's layout), affine4 / affine8 (mlx-lm's, groups of 64) or "
                  "affine<4|8>-g<32|64|128>")
      ->capture_default_str();
  add_report_option(cmd, opts->output);
  cmd->callback([opts] { run_bench(*opts); });
}

}  // namespace m3::cli
