// m3 bench batch: what continuous batching buys in decode. For each batch size B, B sequences
// (each with its own cache filled to depth d) decode n tokens together, one forward pass per step;
// reported as aggregate tokens/s and per-sequence tokens/s, side by side with B = 1 in one run.
#include <cstdio>
#include <memory>

#include "m3/error.h"
#include "bench_report.h"
#include "bench_util.h"
#include "commands.h"
#include "usage.h"
#include "m3/batch.h"
#include "m3/engine.h"
#include "m3/prompt.h"

namespace m3::cli {

void register_bench_batch(CLI::App* bench) {
  struct Args {
    std::string model, batches = "1,2,4,8";
    long long depth = 0;
    int n = 32, reps = 3, threads = 0;
    std::string output = "md";
    bool skip_bounds = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("batch", "Batched decode: B sequences per forward pass (continuous batching)");
  cmd->add_option("-m,--model", a->model, "Model folder")->required();
  cmd->add_option("-B,--batches", a->batches, "Batch sizes, comma-separated")->capture_default_str();
  cmd->add_option("-d,--depth", a->depth, "Tokens already in each sequence's cache")->capture_default_str()
      ->check(NonNegative());
  cmd->add_option("-n,--gen", a->n, "Decode steps per repetition")->capture_default_str()->check(Positive());
  cmd->add_option("-r,--reps", a->reps, "Repetitions")->capture_default_str()->check(Positive());
  cmd->add_option("-t,--threads", a->threads, "Threads (default: one per usable CPU)");
  cmd->add_flag("--skip-bounds", a->skip_bounds, "Do not measure bandwidth and FMA peak");
  add_report_option(cmd, a->output);
  cmd->callback([a] {
    std::vector<long long> batches = parse_int_list(a->batches, "--batches");
    auto engine = Engine::load(a->model, a->threads);
    const int V = engine->info().sample_vocab;
    auto token_at = [&](long long seq, long long i) { return int32_t((i * 7919 + seq * 104729 + 13) % V); };
    const int threads = engine->info().threads;
    BenchReport report(report_format_of(a->output));
    report.machine_facts(threads, a->skip_bounds ? MachineBounds{} : measure_machine_bounds(threads, BenchClock{}));
    report.fact("model", a->model);
    report.fact("depth", a->depth);
    report.fact("decode_steps", a->n);
    report.table("Batched decode: B sequences, one forward pass per step",
                 {{"batch", ""}, {"ms_per_step", "ms per step"}, {"aggregate_tps", "aggregate t/s"},
                  {"tps_per_sequence", "t/s per sequence"}, {"vs_batch_1", "aggregate vs batch 1"}});
    double base = 0;
    for (long long B : batches) {
      M3_CHECK(B >= 1, "--batches: sizes must be >= 1");
      // B sequences, each at `depth` (kept in the prefix cache between repetitions); a repetition
      // is n steps of one token per sequence, all in one forward pass per step (the first token of
      // each is the last of its prompt).
      BatchOptions bo;
      bo.chunk = int(std::max<long long>(512, B));
      bo.prefix_cache_bytes = UINT64_MAX;
      Batch batch(*engine, bo);
      std::vector<Prompt> prompts(static_cast<size_t>(B));
      for (long long s = 0; s < B; ++s) {
        std::vector<int32_t> ids;
        for (long long i = 0; i <= a->depth; ++i) ids.push_back(token_at(s, i));
        prompts[size_t(s)].append_tokens(ids);
      }
      auto keep_depth = [&](Batch::Id id, const Prompt& p) {
        batch.finish(id, std::vector<int32_t>(p.keys().begin(), p.keys().begin() + a->depth));
      };
      auto step = [&] {
        const Batch::StepResult r = batch.step();
        if (!r.failed.empty()) fail(r.error);
      };
      for (const Prompt& p : prompts) {  // fill each sequence's depth (not timed)
        const Batch::Id id = batch.add(p);
        while (batch.prefilling(id)) step();
        keep_depth(id, p);
      }
      std::vector<Batch::Id> ids(static_cast<size_t>(B));
      const Timing t = time_runs(a->reps, 1, [&] {
        for (long long s = 0; s < B; ++s) ids[size_t(s)] = batch.add(prompts[size_t(s)]);
        step();  // each sequence's one prompt token left after its depth
        for (int i = 1; i < a->n; ++i) {
          for (long long s = 0; s < B; ++s) batch.feed(ids[size_t(s)], {token_at(s, a->depth + i)});
          step();
        }
        for (long long s = 0; s < B; ++s) keep_depth(ids[size_t(s)], prompts[size_t(s)]);
      });
      const double agg = double(B) * a->n / t.median;
      if (base == 0) base = agg / double(B) * 1.0;
      report.row({B, Cell(1000.0 * t.median / a->n, "%.2f"), Cell(agg), Cell(agg / double(B)),
                  Cell(base > 0 ? agg / base : 0.0, "%.2fx")});
    }
    report.finish();
  });
}

}  // namespace m3::cli
