// m3 bench libs: our weight matmul against the libraries the fast-MSA issue names, side by side in
// one run, on the engine's operation y[M,N] = x[M,K]·W[N,K]ᵀ with W stored as bf16:
//   * ours: bf16 weights read in place, widened exactly, fp32 accumulation (kernels/matmul.h);
//   * OpenBLAS sgemm: needs an fp32 copy of W (twice the memory of the mapped checkpoint);
//   * oneDNN bf16 matmul: reads W in place but rounds x to bf16 too (AVX-512-BF16 dot products).
// For each: time, GFLOP/s, weight GB/s, and the largest error against a float64 product of the
// same operands (x as given, W as stored), relative to the largest |y| — the number that decides
// whether a path can keep the engine within the reference test's budget. Built only when the
// libraries are found (libopenblas-dev, libdnnl-dev); otherwise the subcommand says so.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "m3/dtype.h"
#include "m3/error.h"
#include "base/thread_pool.h"
#include "bench_report.h"
#include "bench_util.h"
#include "commands.h"
#include "usage.h"
#include "kernels/matmul.h"

#ifdef M3_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef M3_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace m3::cli {

void register_bench_gemm_libs(CLI::App* bench);

#if defined(M3_HAVE_OPENBLAS) || defined(M3_HAVE_DNNL)
namespace {

// Largest |y - exact| / max |exact| over every output, exact = float64 x·Wᵀ.
double max_relative_error(const std::vector<float>& x, const std::vector<uint16_t>& w, int64_t M, int64_t N,
                          int64_t K, const std::vector<float>& y) {
  double worst = 0, scale = 0;
  std::vector<double> exact(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(x[size_t(m * K + k)]) * double(bf16_to_f32(w[size_t(n * K + k)]));
      exact[size_t(m * N + n)] = s;
      scale = std::max(scale, std::fabs(s));
    }
  for (size_t i = 0; i < exact.size(); ++i) worst = std::max(worst, std::fabs(double(y[i]) - exact[i]));
  return scale > 0 ? worst / scale : worst;
}

double median_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (and the libraries' one-time setup)
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = seconds_now();
    fn();
    t.push_back(seconds_now() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace
#endif

void register_bench_gemm_libs(CLI::App* bench) {
  struct Args {
    std::string ms = "1,16,512", shapes = "4096x4096";
    int threads = 0, reps = 5;
    std::string output = "md";
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("libs", "Our bf16-weight matmul vs OpenBLAS sgemm and oneDNN bf16 (time and error)");
  cmd->add_option("-m,--m", a->ms, "Batch sizes M, comma-separated")->capture_default_str();
  cmd->add_option("-s,--shapes", a->shapes, "Weight shapes NxK, comma-separated")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Threads (default: one per usable CPU)");
  cmd->add_option("-r,--reps", a->reps, "Repetitions (median)")->capture_default_str()->check(Positive());
  add_report_option(cmd, a->output);
  cmd->callback([a] {
#if !defined(M3_HAVE_OPENBLAS) && !defined(M3_HAVE_DNNL)
    fail("bench libs: this m3 was built without OpenBLAS and oneDNN (install libopenblas-dev libdnnl-dev and rebuild)");
#else
    ThreadPool pool(a->threads);
    const int threads = pool.size();
#ifdef M3_HAVE_OPENBLAS
    openblas_set_num_threads(threads);
#endif
#ifdef M3_HAVE_DNNL
    setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);  // oneDNN's OpenMP runtime
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
#endif
    BenchReport report(report_format_of(a->output));
    report.machine_facts(threads, measure_machine_bounds(threads, BenchClock{}));
    report.table("Weight matmul against OpenBLAS and oneDNN; error = max |y - float64 x·Wᵀ| / max |y|, W as stored (bf16)",
                 {{"shape", "N×K"}, {"m", "M"}, {"library", ""}, {"time_ms", "time ms"}, {"gflops", "GFLOP/s"},
                  {"weight_gbs", "weight GB/s"}, {"max_rel_error", "max rel error"}});
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (const std::string& shape : [&] {
           std::vector<std::string> v;
           size_t i = 0;
           while (i <= a->shapes.size()) {
             size_t j = a->shapes.find(',', i);
             if (j == std::string::npos) j = a->shapes.size();
             v.push_back(a->shapes.substr(i, j - i));
             i = j + 1;
           }
           return v;
         }()) {
      const size_t xpos = shape.find('x');
      M3_CHECK(xpos != std::string::npos, "--shapes: expected NxK, got '", shape, "'");
      const int64_t N = std::stoll(shape.substr(0, xpos)), K = std::stoll(shape.substr(xpos + 1));
      std::vector<uint16_t> w(static_cast<size_t>(N * K));
      for (auto& v : w) v = f32_to_bf16(0.05f * dist(rng));
      std::vector<float> wf(w.size());
      for (size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_f32(w[i]);
      const LinearWeight wm = dense_weight(DType::BF16, reinterpret_cast<const uint8_t*>(w.data()), N, K);
      for (long long M : parse_int_list(a->ms, "--m")) {
        M3_CHECK(M >= 1, "--m: sizes must be >= 1");
        std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
        for (auto& v : x) v = dist(rng);
        const double flops = 2.0 * double(M) * double(N) * double(K);
        auto row = [&](const char* name, double s, double err, double weight_bytes) {
          report.row({std::to_string(N) + "x" + std::to_string(K), M, name, Cell(1e3 * s, "%.3f"),
                      Cell(flops / s / 1e9, "%.0f"), Cell(weight_bytes / s / 1e9), Cell(err, "%.1e")});
        };
        const double ours = median_seconds(a->reps, [&] { matmul(pool, x.data(), M, wm, y.data()); });
        row("ours (bf16 W, fp32 x)", ours, max_relative_error(x, w, M, N, K, y), 2.0 * N * K);
#ifdef M3_HAVE_OPENBLAS
        const double blas = median_seconds(a->reps, [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.0f, x.data(), int(K), wf.data(),
                      int(K), 0.0f, y.data(), int(N));
        });
        row("OpenBLAS sgemm (fp32 copy of W)", blas, max_relative_error(x, w, M, N, K, y), 4.0 * N * K);
#endif
#ifdef M3_HAVE_DNNL
        {
          using dnnl::memory;
          const memory::desc src_md({M, K}, memory::data_type::bf16, memory::format_tag::ab);
          const memory::desc wei_md({K, N}, memory::data_type::bf16, memory::format_tag::ba);  // W[N][K] as stored
          const memory::desc dst_md({M, N}, memory::data_type::f32, memory::format_tag::ab);
          const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), eng);
          const dnnl::matmul prim(pd);
          std::vector<uint16_t> xb(x.size());
          memory src_mem(src_md, eng, xb.data()), wei_mem(wei_md, eng, w.data()), dst_mem(dst_md, eng, y.data());
          const double dnnl_s = median_seconds(a->reps, [&] {
            for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);  // the activations' rounding is part of the cost
            prim.execute(strm, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, dst_mem}});
            strm.wait();
          });
          row("oneDNN bf16 (x rounded to bf16)", dnnl_s, max_relative_error(x, w, M, N, K, y), 2.0 * N * K);
        }
#endif
      }
    }
    report.finish();
#endif
  });
}

}  // namespace m3::cli
