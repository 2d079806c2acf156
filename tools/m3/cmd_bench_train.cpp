// m3 bench train: a training step's throughput and where its time goes (docs/BENCHMARKS.md).
//   * the fp32 FMA peak, measured in the same run;
//   * tokens/s of a whole step (forward + backward + AdamW) in the sparse stage and the dense warm-up;
//   * per op: forward and backward ms per step, backward/forward, share of the step, and the matmul
//     ops' GFLOP/s against the peak.
// The model is a folder (its weights are not needed: training starts from a fresh initialization).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench_report.h"
#include "commands.h"
#include "m3/error.h"
#include "base/thread_pool.h"
#include "io/model_config.h"
#include "train/optimizer.h"
#include "train/train_model.h"
#include "usage.h"

namespace m3::cli {

void register_bench_train(CLI::App* bench);

namespace {

struct TrainBenchOptions {
  std::string model, output = "md";
  int threads = 0, steps = 3;
  int64_t seq = 512, batch = 2;
};

struct StageResult {
  double step_s = 0;  // median seconds per step
  train::OpProfile profile;
};

StageResult run_stage(ThreadPool& pool, train::TrainModel<float>& model, train::AdamW& opt, const TrainBenchOptions& o, bool dense) {
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> tokens(size_t(o.batch * o.seq)), targets(tokens.size());
  std::mt19937 rng(1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(rng() % uint32_t(V));
  for (size_t i = 0; i < tokens.size(); ++i) targets[i] = i + 1 < tokens.size() ? tokens[i + 1] : -1;
  train::StepOptions so;
  so.indexer_warmup = dense;
  StageResult out;
  std::vector<double> times;
  for (int s = 0; s <= o.steps; ++s) {  // step 0 warms up (allocations, page faults), untimed
    train::OpProfile prof;
    model.profile = s > 0 ? &prof : nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    std::fill(model.grads.begin(), model.grads.end(), 0.0f);
    model.forward_backward(tokens.data(), targets.data(), o.batch, o.seq, so);
    {
      train::OpScope op(model.profile, "AdamW", true);
      opt.step(pool, model.params, model.grads, 1e-4);
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s == 0) continue;
    times.push_back(t);
    for (const auto& e : prof.ops) {
      auto& acc = out.profile.entry(e.name.c_str());
      acc.forward_s += e.forward_s / o.steps;
      acc.backward_s += e.backward_s / o.steps;
      acc.forward_flops += e.forward_flops / o.steps;
      acc.backward_flops += e.backward_flops / o.steps;
    }
  }
  model.profile = nullptr;
  std::sort(times.begin(), times.end());
  out.step_s = times[times.size() / 2];
  return out;
}

}  // namespace

void register_bench_train(CLI::App* bench) {
  auto o = std::make_shared<TrainBenchOptions>();
  CLI::App* cmd = bench->add_subcommand("train", "Training step throughput and time per op (forward, backward)");
  cmd->add_option("-m,--model", o->model, "Model folder (its config.json is used)")->required();
  cmd->add_option("--seq-len", o->seq, "Tokens per sequence")->capture_default_str()->check(Positive());
  cmd->add_option("-b,--batch-size", o->batch, "Sequences per step")->capture_default_str()->check(Positive());
  cmd->add_option("--steps", o->steps, "Timed steps per stage (median)")->capture_default_str()->check(Positive());
  cmd->add_option("-t,--threads", o->threads, "Threads (default: one per usable CPU)")->check(NonNegative());
  add_report_option(cmd, o->output);
  cmd->callback([o] {
    const ModelConfig cfg = ModelConfig::from_file((std::filesystem::path(o->model) / "config.json").string());
    ThreadPool pool(o->threads);
    const MachineBounds bounds = measure_machine_bounds(pool.size(), BenchClock{});
    train::TrainModel<float> model(cfg, pool);
    std::mt19937_64 rng(3);
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (float& p : model.params) p = d(rng);
    model.grads.assign(model.params.size(), 0.0f);
    train::AdamW opt(model.table(), {});

    BenchReport report(report_format_of(o->output));
    report.machine_facts(pool.size(), bounds);
    report.fact("model", o->model);
    report.fact("parameters", (long long)model.table().total());
    report.fact("seq_len", (long long)o->seq);
    report.fact("batch", (long long)o->batch);
    report.fact("selection_budget", (long long)cfg.text.sparse.sparse_topk_blocks * cfg.text.sparse.sparse_block_size);
    const double tokens = double(o->batch * o->seq);
    StageResult stages[2];
    for (int dense = 0; dense < 2; ++dense) {
      std::fprintf(stderr, "bench train: %s stage, %d steps of %lld tokens...\n", dense ? "dense warm-up" : "sparse",
                   o->steps, (long long)tokens);
      stages[dense] = run_stage(pool, model, opt, *o, dense != 0);
    }
    report.fact("sparse_tokens_per_s", Cell(tokens / stages[0].step_s, "%.0f"));
    report.fact("dense_tokens_per_s", Cell(tokens / stages[1].step_s, "%.0f"));
    for (int dense = 0; dense < 2; ++dense) {
      const StageResult& r = stages[dense];
      double flops = 0;
      for (const auto& e : r.profile.ops) flops += e.forward_flops + e.backward_flops;
      report.table(std::string(dense ? "Dense warm-up" : "Sparse (MSA)") + " stage: " + std::to_string(int64_t(tokens)) +
                       " tokens per step, median of " + std::to_string(o->steps) + " steps",
                   {{"op", ""}, {"fwd_ms", "fwd ms"}, {"bwd_ms", "bwd ms"}, {"bwd_over_fwd", "bwd/fwd"},
                    {"share", "share of step"}, {"gflops", "matmul GFLOP/s"}, {"of_peak", "of FMA peak"}});
      for (const auto& e : r.profile.ops) {
        const double total = e.forward_s + e.backward_s, f = e.forward_flops + e.backward_flops;
        report.row({e.name, Cell(e.forward_s * 1e3, "%.2f"), Cell(e.backward_s * 1e3, "%.2f"),
                    e.forward_s > 0 && e.backward_s > 0 ? Cell(e.backward_s / e.forward_s, "%.2f") : Cell("-"),
                    Cell(100.0 * total / r.step_s, "%.1f%%"), f > 0 ? Cell(f / total / 1e9, "%.1f") : Cell("-"),
                    f > 0 ? Cell(100.0 * f / total / 1e9 / bounds.fma_peak_gflops, "%.1f%%") : Cell("-")});
      }
      report.row({"whole step", Cell(r.step_s * 1e3, "%.1f"), "", "", Cell("100%"), Cell(flops / r.step_s / 1e9, "%.1f"),
                  Cell(100.0 * flops / r.step_s / 1e9 / bounds.fma_peak_gflops, "%.1f%%")});
      report.note("tokens/s: " + std::to_string(int64_t(tokens / r.step_s)) +
                  " (forward + backward + AdamW); the indexer KL runs its backward inside the forward pass (listed "
                  "under bwd); matmul FLOPs are counted per op, attention's dot products are not");
    }
    report.finish();
  });
}

}  // namespace m3::cli
