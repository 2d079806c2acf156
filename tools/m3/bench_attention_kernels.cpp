#include "bench_attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "attention/attention_kernels_impl.h"
#include "base/cpu_features.h"
#include "bench_util.h"

namespace m3::cli {

namespace {

// A dense step's operands: `heads` query heads (pre-scaled), `pages` K pages ([hd][B]) and V pages
// ([B][hd]) of the page type, the scores and the running softmax state.
struct StepData {
  int heads = 0, hd = 0, B = 0, pages = 0, ld = 0;
  std::vector<float> q, S, m, l, o;
  std::vector<std::vector<float>> kf, vf;        // f32 pages
  std::vector<std::vector<uint16_t>> kb, vb;     // bf16 pages
  std::vector<std::vector<uint8_t>> k8, v8;      // fp8 pages
  std::vector<std::vector<uint8_t>> ks8, vs8;    // their scales
  std::vector<const float*> kf_at, vf_at;
  std::vector<const uint16_t*> kb_at, vb_at;
  std::vector<const uint8_t*> k8_at, v8_at, ks8_at, vs8_at;
};

StepData make_step(int heads, int hd, int B, int pages) {
  StepData d;
  d.heads = heads;
  d.hd = hd;
  d.B = B;
  d.pages = pages;
  d.ld = pages * B;
  BenchLcg rng{12345};
  d.q.resize(size_t(heads) * hd);
  for (float& x : d.q) x = rng.next() / std::sqrt(float(hd));
  d.S.resize(size_t(heads) * d.ld);
  d.m.assign(size_t(heads), -INFINITY);
  d.l.assign(size_t(heads), 0.0f);
  d.o.assign(size_t(heads) * hd, 0.0f);
  const size_t n = size_t(hd) * B;
  for (int p = 0; p < pages; ++p) {
    std::vector<float> k(n), v(n);
    for (float& x : k) x = rng.next();
    for (float& x : v) x = rng.next();
    std::vector<uint16_t> k16(n), v16(n);
    std::vector<uint8_t> kc(n), vc(n);
    for (size_t i = 0; i < n; ++i) {
      k16[i] = f32_to_bf16(k[i]);
      v16[i] = f32_to_bf16(v[i]);
      kc[i] = uint8_t(int(128 * (k[i] + 1.0f)) % 0x7f);  // E4M3 codes, no NaN (0x7f, 0xff)
      vc[i] = uint8_t(int(128 * (v[i] + 1.0f)) % 0x7f | (v[i] < 0 ? 0x80 : 0));
    }
    d.kf.push_back(std::move(k));
    d.vf.push_back(std::move(v));
    d.kb.push_back(std::move(k16));
    d.vb.push_back(std::move(v16));
    d.k8.push_back(std::move(kc));
    d.v8.push_back(std::move(vc));
    d.ks8.emplace_back(size_t(B), uint8_t(120));
    d.vs8.emplace_back(size_t(B), uint8_t(120));
  }
  for (int p = 0; p < pages; ++p) {
    d.kf_at.push_back(d.kf[size_t(p)].data());
    d.vf_at.push_back(d.vf[size_t(p)].data());
    d.kb_at.push_back(d.kb[size_t(p)].data());
    d.vb_at.push_back(d.vb[size_t(p)].data());
    d.k8_at.push_back(d.k8[size_t(p)].data());
    d.v8_at.push_back(d.v8[size_t(p)].data());
    d.ks8_at.push_back(d.ks8[size_t(p)].data());
    d.vs8_at.push_back(d.vs8[size_t(p)].data());
  }
  return d;
}

// The step's q·k and P·V calls as the walk makes them: a block of its own read in place (M3's 128
// keys), several blocks' pages in one paged call (the tiny preset's 8 of 16).
void scores(const AttentionKernels& k, DType t, StepData& d) {
  const int n = d.ld;
  if (d.pages == 1) {
    if (t == DType::BF16) k.qk_scores_bf16(d.q.data(), d.heads, d.hd, d.kb_at[0], d.B, n, d.S.data(), d.ld, nullptr, 0);
    else if (t == DType::F8_E4M3)
      k.qk_scores_fp8(d.q.data(), d.heads, d.hd, d.k8_at[0], d.ks8_at[0], d.B, n, d.S.data(), d.ld, nullptr, 0);
    else k.qk_scores_f32(d.q.data(), d.heads, d.hd, d.kf_at[0], d.B, n, d.S.data(), d.ld, nullptr, 0);
    return;
  }
  if (t == DType::BF16) k.qk_scores_paged_bf16(d.q.data(), d.heads, d.hd, d.kb_at.data(), d.B, n, d.S.data(), d.ld);
  else if (t == DType::F8_E4M3)
    k.qk_scores_paged_fp8(d.q.data(), d.heads, d.hd, d.k8_at.data(), d.ks8_at.data(), d.B, n, d.S.data(), d.ld);
  else k.qk_scores_paged_f32(d.q.data(), d.heads, d.hd, d.kf_at.data(), d.B, n, d.S.data(), d.ld);
}

void values(const AttentionKernels& k, DType t, StepData& d) {
  const int n = d.ld;
  if (d.pages == 1) {
    if (t == DType::BF16) k.pv_bf16(d.S.data(), d.heads, d.ld, n, d.vb_at[0], d.hd, d.o.data(), nullptr, 0);
    else if (t == DType::F8_E4M3)
      k.pv_fp8(d.S.data(), d.heads, d.ld, n, d.v8_at[0], d.vs8_at[0], d.hd, d.o.data(), nullptr, 0);
    else k.pv_f32(d.S.data(), d.heads, d.ld, n, d.vf_at[0], d.hd, d.o.data(), nullptr, 0);
    return;
  }
  if (t == DType::BF16) k.pv_paged_bf16(d.S.data(), d.heads, d.ld, n, d.vb_at.data(), d.B, d.hd, d.o.data());
  else if (t == DType::F8_E4M3)
    k.pv_paged_fp8(d.S.data(), d.heads, d.ld, n, d.v8_at.data(), d.vs8_at.data(), d.B, d.hd, d.o.data());
  else k.pv_paged_f32(d.S.data(), d.heads, d.ld, n, d.vf_at.data(), d.B, d.hd, d.o.data());
}

// Seconds per call of fn: the median of `reps` loops of `calls` calls.
double per_call(int reps, int calls, const BenchClock& clock, const std::function<void()>& fn) {
  const Timing t = time_runs(reps, 1, [&] {
    for (int i = 0; i < calls; ++i) fn();
  }, clock);
  return t.median / calls;
}

}  // namespace

void report_step_kernels(const StepShape& s, DType page_type, int reps, const BenchClock& clock, double core_peak,
                         BenchReport& report) {
  // The dense walk's step (msa_attention.cpp): blocks of up to 128 keys side by side (softmax_span),
  // and as many rows as keep the scores near 16 KiB (4,096 floats), each with its group's query heads.
  const int B = s.block, pages = B >= 128 ? 1 : 128 / B, ld = pages * B;
  const int Hg = s.q_heads / s.kv_heads, heads = std::max(1, 4096 / (Hg * ld)) * Hg, hd = s.head_dim;
  char title[320];
  std::snprintf(title, sizeof title,
                "%s: a dense softmax step's kernels alone (one thread, cache-resident, %s pages): %d query heads x %d "
                "keys (%d page%s of %d) x %d dims, median",
                s.name.c_str(), std::string(dtype_name(page_type)).c_str(), heads, ld, pages, pages == 1 ? "" : "s", B, hd);
  report.table(title, {{"path", "path"},
                       {"qk_ns", "q·k ns"},
                       {"qk_gflops", "q·k GFLOP/s"},
                       {"softmax_ns", "softmax ns"},
                       {"softmax_ns_per_head", "softmax ns per head"},
                       {"pv_ns", "P·V ns"},
                       {"pv_gflops", "P·V GFLOP/s"},
                       {"step_ns", "step ns"},
                       {"step_gflops", "step GFLOP/s"},
                       {"step_of_peak", "step % of one core's peak"}});
  const double flops = 2.0 * heads * ld * hd;  // each of q·k and P·V
  // About 20 MFLOP a loop, so that a loop takes milliseconds on the SIMD paths.
  const int calls = std::max(1, int(2e7 / flops));
  for (CpuPath path : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve}) {
    if (!cpu_path_supported(path)) continue;
    const AttentionKernels& k = attention_kernels_for(path);
    if (std::strcmp(k.name, cpu_path_name(path)) != 0) continue;  // a path without kernels of its own
    StepData d = make_step(heads, hd, B, pages);
    const double qk = per_call(reps, calls, clock, [&] { scores(k, page_type, d); });
    // The weights of the scores: every call after the first keeps each head's maximum, as deep in a
    // dense row, where a new maximum (and the rescale of o it brings) is rare.
    const double sm = per_call(reps, calls, clock, [&] {
      k.softmax_block_update(d.S.data(), heads, ld, ld, d.m.data(), d.l.data(), d.o.data(), hd);
    });
    const double pv = per_call(reps, calls, clock, [&] { values(k, page_type, d); });
    const double step = per_call(reps, calls, clock, [&] {
      scores(k, page_type, d);
      k.softmax_block_update(d.S.data(), heads, ld, ld, d.m.data(), d.l.data(), d.o.data(), hd);
      values(k, page_type, d);
    });
    const double step_rate = 2 * flops / step / 1e9;
    report.row({k.name, Cell(qk * 1e9, "%.0f"), Cell(flops / qk / 1e9, "%.1f"), Cell(sm * 1e9, "%.0f"),
                Cell(sm * 1e9 / heads, "%.1f"), Cell(pv * 1e9, "%.0f"), Cell(flops / pv / 1e9, "%.1f"),
                Cell(step * 1e9, "%.0f"), Cell(step_rate, "%.1f"),
                core_peak > 0 ? Cell(100 * step_rate / core_peak, "%.0f%%") : Cell("–")});
  }
}

}  // namespace m3::cli
