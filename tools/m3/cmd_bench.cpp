// m3 bench: llama-bench-style throughput of the whole model. For each depth d the cache is first
// filled with d tokens; then pp = prefill of p tokens at depth d, tg = n single-token decode steps
// at depth d (the cache is cut back to d between repetitions). The fill text is one fixed token
// sequence, so every depth is a prefix of the next: one cache is cut back and filled on from the
// previous depth (cutting a cache is exact), instead of prefilling each depth from zero. The fill
// is a row too (fillN: the N tokens it prefilled, in chunks of -b): a long prompt's prefill, the
// figure other engines report for one (llama.cpp's prefill of a whole context).
//
// Several models (-m A -m B ...) are measured side by side, as llama-bench does: each fills its
// own cache to the depth, then the repetitions alternate between the models (pp and tg of A, then
// of B, ...), so that a machine whose speed drifts over minutes (other tenants, memory bandwidth
// shared with them) slows every model alike and their ratios hold. Each row also gives its speed
// as a multiple of the first model's at the same test and depth.
//
// A decode step reads the weights from memory, so its GB/s is compared with the read bandwidth;
// that bandwidth drifts as much as the models' speed does (by 2x within minutes on a shared cloud
// guest), so it is measured again beside every tg run (the best of three passes before it and of
// three after), and each tg row is compared with the readings beside its own runs rather than with
// the figure of the start.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>

#include "m3/error.h"
#include "bench_report.h"
#include "bench_util.h"
#include "cache_type.h"
#include "commands.h"
#include "usage.h"
#include "io/model_config.h"
#include "io/model_work.h"
#include "io/safetensors.h"
#include "base/machine_bounds.h"
#include "base/thread_pool.h"
#include "m3/batch.h"
#include "m3/engine.h"
#include "m3/prompt.h"

namespace m3::cli {

void register_bench_attention(CLI::App* bench);
void register_bench_matmul(CLI::App* bench);
void register_bench_batch(CLI::App* bench);
void register_bench_vision(CLI::App* bench);
void register_bench_gemm_libs(CLI::App* bench);
void register_bench_json(CLI::App* bench);
void register_bench_train(CLI::App* bench);

namespace {

struct WholeModelArgs {
  std::vector<std::string> models;
  std::string depths = "0,16384,65536", cache_type = kDefaultCacheType, clock = "wall";
  int p = 512, n = 128, reps = 3, threads = 0, chunk = 512;
  std::string output = "md";
  bool json = false, skip_bounds = false, no_warmup = false;
};

// One model under test: its engine, the work its shapes imply (io/model_work.h), and one sequence
// slot whose prefix cache keeps the filled depth between runs.
class WholeModelBench {
 public:
  WholeModelBench(const std::string& dir, const WholeModelArgs& a)
      : dir_(dir),
        a_(a),
        engine_(Engine::load(dir, a.threads)),
        cfg_(ModelConfig::from_file((std::filesystem::path(dir) / "config.json").string())),
        linears_(linear_sizes(TensorStore::open_dir(dir), cfg_)),
        cache_type_(cache_type_of(a.cache_type)),
        batch_(*engine_, batch_options(a)) {}

  const std::string& dir() const { return dir_; }
  int threads() const { return engine_->info().threads; }

  // What a fill prefilled. Below the last depth, the cache is cut back and one token prefilled.
  struct Fill {
    int64_t tokens = 0;
    double seconds = 0;  // on the run's clock
    ForwardWork work;
  };

  // Fills the cache to depth d (from the previous depth, a prefix of it), with a progress line
  // that reads the fill's speed against the FMA peak.
  Fill fill(long long d, double fma_peak_gflops, const BenchClock& clock) {
    const Prompt fill = prompt_of(d, 0);
    const double t0 = seconds_now(), c0 = clock.now();
    ForwardWork work;     // of the chunks prefilled so far
    int64_t counted = 0;  // tokens in `work`
    const Batch::Id id = run(fill, a_.chunk, [&](int64_t done, int64_t total) {
      const double s = seconds_now() - t0;
      const int64_t start = d - total;
      while (counted < done) {  // the step just taken: chunks of at most a_.chunk rows
        const int64_t rows = std::min<int64_t>(a_.chunk, done - counted);
        work += forward_work(cfg_, linears_, uint64_t(start + counted), uint64_t(rows), cache_type_);
        counted += rows;
      }
      const double gflops = work.flops() / s * 1e-9;
      const std::string of_peak =
          fma_peak_gflops > 0 ? str_cat(" (", std::lround(100 * gflops / fma_peak_gflops), "% of the FMA peak)") : "";
      std::fprintf(stderr, "\r%s: filling depth %lld: %lld/%lld tokens, %.0f tok/s, %.0f GFLOP/s%s, ETA %.0f s   ",
                   dir_.c_str(), d, (long long)(start + done), d, done / s, gflops, of_peak.c_str(),
                   (total - done) / std::max(done / s, 1e-9));
    });
    Fill f{counted, clock.since(c0), work};
    if (counted > 0) std::fprintf(stderr, "\n");
    keep_depth(id, fill, d);
    return f;
  }

  // pp: the p tokens after depth d in one forward pass. Seconds.
  double time_pp(long long d, const BenchClock& clock) {
    const Prompt pp = prompt_of(d, a_.p);
    return time_once([&] { keep_depth(run(pp, a_.p, {}), pp, d); }, clock);
  }

  // tg: n single-token steps after depth d (the first is the prompt's last token, prefilled
  // alone). Seconds.
  double time_tg(long long d, const BenchClock& clock) {
    const Prompt tg = prompt_of(d, 1);
    return time_once([&] { decode(tg, d, a_.n); }, clock);
  }

  // One untimed pp and a few decode steps at depth d: the first touch of the weights (page faults,
  // a cold cache) and the pool's first start-up stay out of the timed runs, as in llama-bench.
  void warm_up(long long d) {
    const Prompt pp = prompt_of(d, a_.p);
    keep_depth(run(pp, a_.p, {}), pp, d);
    decode(prompt_of(d, 1), d, std::min(a_.n, 4));
  }

  ForwardWork pp_work(long long d) const { return forward_work(cfg_, linears_, uint64_t(d), uint64_t(a_.p), cache_type_); }
  ForwardWork tg_work(long long d) const {
    ForwardWork w;
    for (int i = 0; i < a_.n; ++i) w += forward_work(cfg_, linears_, uint64_t(d + i), 1, cache_type_);
    return w;
  }

 private:
  static BatchOptions batch_options(const WholeModelArgs& a) {
    BatchOptions bo;
    bo.chunk = std::max(a.chunk, a.p);
    bo.cache_type = cache_type_of(a.cache_type);
    bo.prefix_cache_bytes = UINT64_MAX;  // one sequence at a time; the prefix cache keeps its depth
    bo.prefix_cache_entries = 1;
    return bo;
  }

  // The fixed text: arbitrary ids, the same for every depth, so each depth is a prefix of the next.
  int32_t token_at(long long i) const { return int32_t((i * 7919 + 13) % engine_->info().sample_vocab); }

  // The first d + extra tokens of the text.
  Prompt prompt_of(long long d, long long extra) const {
    std::vector<int32_t> ids;
    for (long long i = 0; i < d + extra; ++i) ids.push_back(token_at(i));
    Prompt p;
    p.append_tokens(ids);
    return p;
  }

  // `steps` single-token steps after depth d (tg: the text's first d + 1 tokens), then back to
  // depth d.
  void decode(const Prompt& tg, long long d, int steps) {
    const Batch::Id id = run(tg, 1, {});
    for (int i = 1; i < steps; ++i) {
      batch_.feed(id, {token_at(d + i)});
      const Batch::StepResult r = batch_.step();
      if (!r.failed.empty()) fail(r.error);
    }
    keep_depth(id, tg, d);
  }

  // Prefills `prompt` (after what the prefix cache reuses) in steps of at most max_rows;
  // on_step(done, total) after each.
  Batch::Id run(const Prompt& prompt, int max_rows, const std::function<void(int64_t, int64_t)>& on_step) {
    SequenceOptions so;
    so.max_rows = max_rows;
    int64_t reused = 0;
    const Batch::Id id = batch_.add(prompt, &reused, so);
    while (batch_.prefilling(id)) {
      const Batch::StepResult r = batch_.step();
      if (!r.failed.empty()) fail(r.error);
      if (on_step) on_step(batch_.prefilled(id), prompt.size() - reused);
    }
    return id;
  }

  // Ends the sequence, keeping its first d tokens in the prefix cache.
  void keep_depth(Batch::Id id, const Prompt& prompt, long long d) {
    std::vector<int32_t> keys(prompt.keys().begin(), prompt.keys().begin() + d);
    batch_.finish(id, std::move(keys));
  }

  std::string dir_;
  const WholeModelArgs& a_;
  std::unique_ptr<Engine> engine_;
  ModelConfig cfg_;
  LinearSizes linears_;
  DType cache_type_;
  Batch batch_;
};

}  // namespace

std::vector<long long> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<long long> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
    }
    M3_CHECK(used == item.size() && v >= 0, what, ": expected non-negative integers separated by commas, got '", item, "'");
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

void register_bench(CLI::App& app) {
  auto a = std::make_shared<WholeModelArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmarks: the whole model (-m DIR), or one of the subcommands below");
  cmd->require_subcommand(0, 1);
  cmd->add_option("-m,--model", a->models,
                  "Model folder; several (-m A -m B) are measured side by side, their repetitions alternated");
  cmd->add_option("-p,--prompt", a->p, "Prefill tokens per pp test")->capture_default_str()->check(Positive());
  cmd->add_option("-n,--gen", a->n, "Decode steps per tg test")->capture_default_str()->check(Positive());
  cmd->add_option("-d,--depths", a->depths, "Context depths, comma-separated")->capture_default_str();
  cmd->add_option("-r,--reps", a->reps, "Repetitions")->capture_default_str()->check(Positive());
  cmd->add_option("-b,--chunk", a->chunk, "Prefill chunk when filling the depth")->capture_default_str()->check(Positive());
  cmd->add_option("-t,--threads", a->threads, "Threads (default: one per usable CPU)");
  add_cache_type_option(cmd, a->cache_type);
  cmd->add_option("--clock", a->clock, "wall, or cpu: process CPU time / threads (on a busy machine)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  add_report_option(cmd, a->output);
  cmd->add_flag("--json", a->json, "Same as -o jsonl (JSON lines; kept for scripts)");
  cmd->add_flag("--skip-bounds", a->skip_bounds, "Do not measure bandwidth and FMA peak");
  cmd->add_flag("--no-warmup", a->no_warmup, "No untimed pp and decode steps before the first depth's repetitions");
  register_bench_attention(cmd);
  register_bench_matmul(cmd);
  register_bench_batch(cmd);
  register_bench_vision(cmd);
  register_bench_gemm_libs(cmd);
  register_bench_json(cmd);
  register_bench_train(cmd);
  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;  // a bench subcommand ran
    M3_CHECK(!a->models.empty(), "bench: give a model folder with -m, or a subcommand (attention, matmul, batch, vision, libs, json)");
    const std::vector<long long> depths = parse_int_list(a->depths, "--depths");
    std::vector<std::unique_ptr<WholeModelBench>> models;
    for (const std::string& dir : a->models) models.push_back(std::make_unique<WholeModelBench>(dir, *a));
    const int threads = models[0]->threads();
    const BenchClock clock{a->clock == "cpu", threads};
    BenchReport report(a->json ? ReportFormat::Jsonl : report_format_of(a->output));
    const MachineBounds bounds = a->skip_bounds ? MachineBounds{} : measure_machine_bounds(threads, clock);
    report.machine_facts(threads, bounds);
    report.fact("clock", a->clock);
    report.table("Whole model: fillN = the N tokens prefilled to reach depth d, pp = prefill of p tokens at depth d, "
                 "tg = n decode steps at depth d",
                 {{"model", ""}, {"threads", ""}, {"cache", ""}, {"test", ""}, {"depth", ""}, {"tps", "t/s"}, {"tps_sd", "±"},
                  {"vs_first", "× first model"}, {"gflops", "GFLOP/s"}, {"fma_peak_pct", "% FMA peak"},
                  {"gbs", "GB/s read"}, {"bandwidth_gbs", "bandwidth beside it"}, {"bandwidth_pct", "% bandwidth"}});
    // The bandwidth measured beside each tg run (nothing with --skip-bounds).
    std::unique_ptr<ThreadPool> probe_pool;
    std::unique_ptr<ReadBandwidthProbe> probe;
    if (!a->skip_bounds) {
      probe_pool = std::make_unique<ThreadPool>(threads);
      probe = std::make_unique<ReadBandwidthProbe>(*probe_pool, size_t(512) << 20);  // 16x a large L3
    }
    // Rate of `work` done in `seconds`, and its share of the measured bound ("–" when not measured).
    // GB/s only for decode: a prefill chunk's rows share the keys they read, so its traffic is not
    // the sum of theirs (and it is bound by arithmetic, not by bytes).
    // bandwidth_gbs: the read bandwidth beside the (decode) runs, 0 if not measured.
    auto rates = [&](const ForwardWork& work, double seconds, bool decode, double bandwidth_gbs) {
      const double gflops = work.flops() / seconds * 1e-9, gbs = work.bytes() / seconds * 1e-9;
      auto share = [](double x, double bound) { return bound > 0 ? Cell(100 * x / bound, "%.0f") : Cell("–"); };
      std::vector<Cell> cells{Cell(gflops, "%.1f"), share(gflops, bounds.fma_peak_gflops), Cell("–"), Cell("–"), Cell("–")};
      if (decode) {
        cells[2] = Cell(gbs, "%.1f");
        if (bandwidth_gbs > 0) cells[3] = Cell(bandwidth_gbs, "%.1f"), cells[4] = share(gbs, bandwidth_gbs);
      }
      return cells;
    };
    for (size_t di = 0; di < depths.size(); ++di) {
      const long long d = depths[di];
      const bool filled_on = d > (di > 0 ? depths[di - 1] : 0);  // a fill row: the cache grew to d
      std::vector<WholeModelBench::Fill> fills(models.size());
      for (size_t i = 0; i < models.size(); ++i) {
        // The fill is timed too: the weights are touched once before it.
        if (di == 0 && !a->no_warmup && d > 0) models[i]->warm_up(0);
        if (d > 0) fills[i] = models[i]->fill(d, bounds.fma_peak_gflops, clock);
        if (di == 0 && !a->no_warmup) models[i]->warm_up(d);  // later depths follow a fill or the runs before
      }
      // Repetitions alternate between the models; the times of each (pp, tg) per model.
      // With the bounds, each tg run between two readings of the bandwidth, each the best of three
      // passes of the probe, as the bound of the start is (tg_gbs: the readings).
      auto bandwidth_now = [&] {
        double best = 0;
        for (int pass = 0; pass < 3; ++pass) best = std::max(best, probe->measure(clock));
        return best;
      };
      std::vector<std::vector<double>> pp_s(models.size()), tg_s(models.size()), tg_gbs(models.size());
      for (int r = 0; r < a->reps; ++r)
        for (size_t i = 0; i < models.size(); ++i) {
          pp_s[i].push_back(models[i]->time_pp(d, clock));
          if (probe) tg_gbs[i].push_back(bandwidth_now());
          tg_s[i].push_back(models[i]->time_tg(d, clock));
          if (probe) tg_gbs[i].push_back(bandwidth_now());
        }
      double first_fill = 0, first_pp = 0, first_tg = 0;
      for (size_t i = 0; i < models.size(); ++i) {
        const WholeModelBench& m = *models[i];
        const Timing pp = summarize_times(pp_s[i]), tg = summarize_times(tg_s[i]);
        const double pp_tps = a->p / pp.mean, tg_tps = a->n / tg.mean;
        if (i == 0) first_pp = pp_tps, first_tg = tg_tps;
        auto row = [&](const std::string& test, double tps, double first, const Timing& t, const ForwardWork& work,
                       bool decode, double bandwidth_gbs) {
          std::vector<Cell> cells{m.dir(), threads, a->cache_type, test, d, Cell(tps, "%.2f"),
                                  Cell(tps * t.stddev / t.mean, "%.2f"), Cell(tps / first, "%.2f")};
          for (Cell& c : rates(work, t.mean, decode, bandwidth_gbs)) cells.push_back(std::move(c));
          report.row(std::move(cells));
        };
        if (const WholeModelBench::Fill& f = fills[i]; filled_on && f.tokens > 0) {
          const double fill_tps = double(f.tokens) / f.seconds;
          if (i == 0) first_fill = fill_tps;
          row("fill" + std::to_string(f.tokens), fill_tps, first_fill, summarize_times({f.seconds}), f.work, false, 0.0);
        }
        row("pp" + std::to_string(a->p), pp_tps, first_pp, pp, m.pp_work(d), false, 0.0);
        row("tg" + std::to_string(a->n), tg_tps, first_tg, tg, m.tg_work(d), true, tg_gbs[i].empty() ? 0.0 : summarize_times(tg_gbs[i]).mean);
      }
    }
    report.note("GFLOP/s and GB/s: the work the test does by the model's shapes (linears with the top-k experts, "
                "attention over the keys each query sees, MSA index scores; weights in their stored formats, each "
                "distinct expert once per step, and the cache each step reads), over its time. pp is bound by the FMA "
                "peak measured above; tg by the read bandwidth, measured again just before and just after each of its "
                "runs (bandwidth beside it: the mean of those readings, each the best of 3 passes; the machine's "
                "bandwidth drifts).");
    if (models.size() > 1)
      report.note("Several models: the repetitions alternated between them, so a drift of the machine's speed slows "
                  "each alike; × first model is the speed over the first model's at the same test and depth.");
    report.finish();
  });
}

}  // namespace m3::cli
