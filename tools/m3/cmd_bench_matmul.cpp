// m3 bench matmul: the weight-matmul kernels against their bounds, measured side by side in one run.
//   * memory bandwidth: a read-only streaming sum over a buffer far larger than L3 (1 GiB default);
//   * fp32 FMA peak: a register-only FMA loop on every thread, with the vector width of the kernels;
//   * matmul y[M,N] = x[M,K]·W[N,K]ᵀ with bf16 weights for M = 1..512 at model-sized shapes.
// Small M is bounded by streaming the weights (bytes / bandwidth), large M by the FMA peak
// (flops / peak); each row prints the larger of the two bounds and how close the kernel gets.
// Weights are cycled through enough copies that every repetition reads them from DRAM, as decode does.
// Medians of --reps repetitions. M3_CPU=avx2|generic measures the other kernel paths.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "bench_util.h"
#include "commands.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define M3_BENCH_X86 1
#endif

namespace m3::cli {

void register_bench_matmul(CLI::App* bench);

namespace {

// Wall time by default. On a machine shared with other work, --clock cpu divides the process's CPU
// time by the thread count instead: time when descheduled is not counted (sleeping pool workers
// use no CPU time either), which approximates what the kernels do on an idle machine.
struct Clock {
  bool cpu = false;
  int threads = 1;
  double now() const {
    if (!cpu) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)) / threads;
  }
  double since(double t0) const { return now() - t0; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- fp32 FMA peak: independent accumulator chains, nothing but FMAs in the loop ----
// (FMAs do not reassociate, so the compiler keeps every one; the chains stay in registers.)

#ifdef M3_BENCH_X86
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}
#endif

// Plain C++ (the generic path multiplies and adds): 8 chains of 4 floats.
float fma_loop_generic(int64_t iters) {
  float a[32];
  for (int i = 0; i < 32; ++i) a[i] = float(i) * 1e-3f;
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 32; ++i) a[i] = a[i] * 0.999999f + 1e-7f;
  }
  float s = 0;
  for (float v : a) s += v;
  return s;
}

// Returns flops per call of the loop body, per iteration.
double fma_flops_per_iter(CpuPath path) {
  switch (path) {
    case CpuPath::Avx512: return 16 * 16 * 2;
    case CpuPath::Avx2: return 12 * 8 * 2;
    case CpuPath::Generic: return 32 * 2;
  }
  return 0;
}

float fma_loop(CpuPath path, int64_t iters) {
#ifdef M3_BENCH_X86
  if (path == CpuPath::Avx512) return fma_loop_avx512(iters);
  if (path == CpuPath::Avx2) return fma_loop_avx2(iters);
#endif
  return fma_loop_generic(iters);
}

double measure_fma_peak(ThreadPool& pool, const Clock& clock, CpuPath path, int reps) {
  const int threads = pool.size();
  const int64_t iters = path == CpuPath::Generic ? 20'000'000 : 40'000'000;
  std::vector<double> rates;
  std::vector<float> sink(static_cast<size_t>(threads));
  for (int r = 0; r < reps; ++r) {
    const double t0 = clock.now();
    pool.parallel_for(threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sink[size_t(i)] = fma_loop(path, iters);
    });
    rates.push_back(double(threads) * double(iters) * fma_flops_per_iter(path) / clock.since(t0));
  }
  return median(rates);
}

// ---- memory bandwidth: every thread sums its contiguous part of a buffer much larger than L3 ----

#ifdef M3_BENCH_X86
__attribute__((target("avx512f"))) float sum_avx512(const float* p, int64_t n) {
  __m512 a[8];
  for (auto& v : a) v = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 128 <= n; i += 128)
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  float out[16];
  _mm512_storeu_ps(out, a[0]);
  return out[0] + out[15];
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, int64_t n) {
  __m256 a[8];
  for (auto& v : a) v = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 8; ++j) a[j] = _mm256_add_ps(a[j], _mm256_load_ps(p + i + 8 * j));
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  float out[8];
  _mm256_storeu_ps(out, a[0]);
  return out[0] + out[7];
}
#endif

float sum_generic(const float* p, int64_t n) {
  float a[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) a[j] += p[i + j];
  float s = 0;
  for (float v : a) s += v;
  return s;
}

double measure_bandwidth(ThreadPool& pool, const Clock& clock, CpuPath path, size_t bytes, int reps) {
  const int64_t n = int64_t(bytes / sizeof(float)) / 1024 * 1024;
  std::unique_ptr<float[]> owner(new float[size_t(n) + 16]);
  float* buf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(owner.get()) + 63) & ~uintptr_t(63));
  // Touch every page from the thread that will read it (first-touch placement), with real values.
  const int threads = pool.size();
  auto part = [&](int64_t i) { return n / threads * i; };
  pool.parallel_for(threads, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) std::fill(buf + part(t), buf + (t + 1 == threads ? n : part(t + 1)), 1.0f);
  });
  std::vector<float> sink(static_cast<size_t>(threads));
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = clock.now();
    pool.parallel_for(threads, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const float* p = buf + part(t);
        const int64_t len = (t + 1 == threads ? n : part(t + 1)) - part(t);
#ifdef M3_BENCH_X86
        if (path == CpuPath::Avx512) sink[size_t(t)] = sum_avx512(p, len);
        else if (path == CpuPath::Avx2) sink[size_t(t)] = sum_avx2(p, len);
        else
#endif
          sink[size_t(t)] = sum_generic(p, len);
      }
    });
    if (r > 0) rates.push_back(double(n) * sizeof(float) / clock.since(t0));  // the first run warms up
  }
  return median(rates);
}

// ---- the matmul table ----

struct Options {
  int threads = 0;
  int reps = 7;
  std::string ms = "1,2,4,8,16,64,512";
  std::string shapes = "4096x4096,6144x3072";
  int64_t bandwidth_mib = 1024;
  int64_t stream_mib = 256;  // weight copies cycled per shape, so that each repetition reads DRAM
  std::string clock = "wall";
};

struct Row {
  std::string shape;
  int64_t M, N, K;
  double seconds, gflops, gbs, bound_seconds;
  bool compute_bound;
};

void run_bench(const Options& o) {
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
  const Clock clock{o.clock == "cpu", pool.size()};
  const CpuPath path = cpu_active_path();
  const int reps = std::max(1, o.reps);
  std::printf("m3 bench matmul: kernels %s, %d threads, bf16 weights, median of %d, %s clock\n",
              matmul_kernel_name(), pool.size(), reps, clock.cpu ? "cpu (process CPU time / threads)" : "wall");
  std::fflush(stdout);
  const double bw = measure_bandwidth(pool, clock, path, size_t(o.bandwidth_mib) << 20, reps);
  const double peak = measure_fma_peak(pool, clock, path, reps);
  std::printf("measured read bandwidth (%lld MiB streaming sum): %.1f GB/s\n", static_cast<long long>(o.bandwidth_mib),
              bw / 1e9);
  std::printf("measured fp32 FMA peak (%s, register-only): %.1f GFLOP/s\n\n", cpu_path_name(path), peak / 1e9);
  std::fflush(stdout);

  std::vector<Row> rows;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t si = 0; si < shapes.size(); ++si) {
    const std::string& shape = shapes[si];
    const auto [N, K] = nks[si];
    const size_t wbytes = size_t(N * K) * 2;
    const int copies = int(std::max<int64_t>(1, (o.stream_mib << 20) / int64_t(wbytes) + 1));
    std::vector<std::vector<uint16_t>> weights(static_cast<size_t>(copies));
    for (auto& wc : weights) {
      wc.resize(size_t(N * K));
      for (auto& h : wc) h = f32_to_bf16(0.02f * dist(rng));
    }
    for (const long long M : ms) {
      std::vector<float> x(size_t(M * K)), y(size_t(M * N));
      for (float& v : x) v = dist(rng);
      std::vector<double> times;
      for (int r = 0; r < reps + 1; ++r) {
        const WeightMatrix w{DType::BF16, reinterpret_cast<const uint8_t*>(weights[size_t(r % copies)].data()), N, K};
        const double t0 = clock.now();
        matmul(pool, x.data(), M, w, y.data());
        if (r > 0) times.push_back(clock.since(t0));  // the first run warms up
      }
      Row row{shape, M, N, K, median(times), 0, 0, 0, false};
      const double flops = 2.0 * double(M) * double(N) * double(K);
      const double bytes = double(wbytes) + 4.0 * double(M * K + M * N);
      row.gflops = flops / row.seconds / 1e9;
      row.gbs = bytes / row.seconds / 1e9;
      const double t_mem = bytes / bw, t_fma = flops / peak;
      row.compute_bound = t_fma > t_mem;
      row.bound_seconds = std::max(t_mem, t_fma);
      rows.push_back(row);
      std::fprintf(stderr, "  %s M=%lld: %.3f ms\n", shape.c_str(), static_cast<long long>(M), row.seconds * 1e3);
    }
  }

  std::printf("| shape N×K | M | time ms | GFLOP/s | GB/s | bound | %% of bound |\n");
  std::printf("|---|---:|---:|---:|---:|---|---:|\n");
  for (const Row& r : rows)
    std::printf("| %s | %lld | %.3f | %.1f | %.1f | %s | %.0f%% |\n", r.shape.c_str(), static_cast<long long>(r.M),
                r.seconds * 1e3, r.gflops, r.gbs, r.compute_bound ? "FMA peak" : "bandwidth",
                100.0 * r.bound_seconds / r.seconds);
}

}  // namespace

void register_bench_matmul(CLI::App* bench) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = bench->add_subcommand(
      "matmul", "bf16-weight matmul throughput for M = 1..512 against measured bandwidth and FMA peak");
  cmd->add_option("-t,--threads", opts->threads, "Threads (default: all cores)");
  cmd->add_option("-r,--reps", opts->reps, "Repetitions (median)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-m,--m", opts->ms, "Batch sizes M (rows of x), comma-separated")->capture_default_str();
  cmd->add_option("-s,--shapes", opts->shapes, "Weight shapes NxK (out x in), comma-separated")->capture_default_str();
  cmd->add_option("--bandwidth-mib", opts->bandwidth_mib, "Buffer of the bandwidth measurement, MiB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--stream-mib", opts->stream_mib, "Weight copies cycled per shape, MiB (0: one copy, may stay cached)")
      ->capture_default_str();
  cmd->add_option("--clock", opts->clock, "wall, or cpu: process CPU time / threads (on a busy machine)")
      ->capture_default_str();
  cmd->callback([opts] { run_bench(*opts); });
}

}  // namespace m3::cli
