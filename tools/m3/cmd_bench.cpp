// m3 bench: llama-bench-style throughput of the whole model. For each depth d the cache is first
// filled with d tokens; then pp = prefill of p tokens at depth d, tg = n single-token decode steps
// at depth d (the cache is cut back to d between repetitions). The fill text is one fixed token
// sequence, so every depth is a prefix of the next: one cache is cut back and filled on from the
// previous depth (cutting a cache is exact), instead of prefilling each depth from zero.
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
  struct Args {
    std::string model, depths = "0,16384,65536", cache_type = kDefaultCacheType, clock = "wall";
    int p = 512, n = 128, reps = 3, threads = 0, chunk = 512;
    std::string output = "md";
    bool json = false, skip_bounds = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmarks: the whole model (-m DIR), or one of the subcommands below");
  cmd->require_subcommand(0, 1);
  cmd->add_option("-m,--model", a->model, "Model folder");
  cmd->add_option("-p,--prompt", a->p, "Prefill tokens per pp test")->capture_default_str()->check(Positive());
  cmd->add_option("-n,--gen", a->n, "Decode steps per tg test")->capture_default_str()->check(Positive());
  cmd->add_option("-d,--depths", a->depths, "Context depths, comma-separated")->capture_default_str();
  cmd->add_option("-r,--reps", a->reps, "Repetitions")->capture_default_str()->check(Positive());
  cmd->add_option("-b,--chunk", a->chunk, "Prefill chunk when filling the depth")->capture_default_str()->check(Positive());
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  add_cache_type_option(cmd, a->cache_type);
  cmd->add_option("--clock", a->clock, "wall, or cpu: process CPU time / threads (on a busy machine)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  add_report_option(cmd, a->output);
  cmd->add_flag("--json", a->json, "Same as -o jsonl (JSON lines; kept for scripts)");
  cmd->add_flag("--skip-bounds", a->skip_bounds, "Do not measure bandwidth and FMA peak");
  register_bench_attention(cmd);
  register_bench_matmul(cmd);
  register_bench_batch(cmd);
  register_bench_vision(cmd);
  register_bench_gemm_libs(cmd);
  register_bench_json(cmd);
  register_bench_train(cmd);
  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;  // a bench subcommand ran
    M3_CHECK(!a->model.empty(), "bench: give a model folder with -m, or a subcommand (attention, matmul, batch, vision, libs, json)");
    const std::vector<long long> depths = parse_int_list(a->depths, "--depths");
    auto engine = Engine::load(a->model, a->threads);
    const int threads = engine->info().threads;
    const BenchClock clock{a->clock == "cpu", threads};
    const int V = engine->info().sample_vocab;
    auto token_at = [&](long long i) { return int32_t((i * 7919 + 13) % V); };  // arbitrary but fixed text
    // The work each test does (io/model_work.h), to read its speed against the bounds.
    const ModelConfig cfg = ModelConfig::from_file((std::filesystem::path(a->model) / "config.json").string());
    const LinearSizes linears = linear_sizes(TensorStore::open_dir(a->model), cfg);
    const DType cache_type = cache_type_of(a->cache_type);
    BenchReport report(a->json ? ReportFormat::Jsonl : report_format_of(a->output));
    const MachineBounds bounds = a->skip_bounds ? MachineBounds{} : measure_machine_bounds(threads, clock);
    report.machine_facts(threads, bounds);
    report.fact("clock", a->clock);
    report.table("Whole model: pp = prefill of p tokens at depth d, tg = n decode steps at depth d",
                 {{"model", ""}, {"threads", ""}, {"cache", ""}, {"test", ""}, {"depth", ""}, {"tps", "t/s"}, {"tps_sd", "±"},
                  {"gflops", "GFLOP/s"}, {"fma_peak_pct", "% FMA peak"}, {"gbs", "GB/s read"}, {"bandwidth_pct", "% bandwidth"}});
    // Rate of `work` done in `seconds`, and its share of the measured bound ("–" when not measured).
    // GB/s only for decode: a prefill chunk's rows share the keys they read, so its traffic is not
    // the sum of theirs (and it is bound by arithmetic, not by bytes).
    auto rates = [&](const ForwardWork& work, double seconds, bool with_bytes) {
      const double gflops = work.flops() / seconds * 1e-9, gbs = work.bytes() / seconds * 1e-9;
      auto share = [](double x, double bound) { return bound > 0 ? Cell(100 * x / bound, "%.0f") : Cell("–"); };
      std::vector<Cell> cells{Cell(gflops, "%.1f"), share(gflops, bounds.fma_peak_gflops), Cell("–"), Cell("–")};
      if (with_bytes) cells[2] = Cell(gbs, "%.1f"), cells[3] = share(gbs, bounds.read_bandwidth_gbs);
      return cells;
    };
    // One sequence at a time; the prefix cache keeps the filled depth between runs (a run that
    // starts with the same tokens reuses them, and ending it keeps only the depth).
    BatchOptions bo;
    bo.chunk = std::max(a->chunk, a->p);
    bo.cache_type = cache_type_of(a->cache_type);
    bo.prefix_cache_bytes = UINT64_MAX;
    bo.prefix_cache_entries = 1;
    Batch batch(*engine, bo);
    // Prefills `prompt` (after what the prefix cache reuses) in steps of at most max_rows;
    // on_step(done, total) after each.
    auto run = [&](const Prompt& prompt, int max_rows, const std::function<void(int64_t, int64_t)>& on_step) {
      SequenceOptions so;
      so.max_rows = max_rows;
      int64_t reused = 0;
      const Batch::Id id = batch.add(prompt, &reused, so);
      while (batch.prefilling(id)) {
        const Batch::StepResult r = batch.step();
        if (!r.failed.empty()) fail(r.error);
        if (on_step) on_step(batch.prefilled(id), prompt.size() - reused);
      }
      return id;
    };
    auto keep_depth = [&](Batch::Id id, const Prompt& prompt, int64_t d) {
      std::vector<int32_t> keys(prompt.keys().begin(), prompt.keys().begin() + d);
      batch.finish(id, std::move(keys));
    };
    for (long long d : depths) {
      Prompt fill, pp_prompt, tg_prompt;
      std::vector<int32_t> ids;
      for (long long i = 0; i < d; ++i) ids.push_back(token_at(i));
      fill.append_tokens(ids);
      for (int i = 0; i < a->p; ++i) ids.push_back(token_at(d + i));
      pp_prompt.append_tokens(ids);
      ids.resize(size_t(d));
      ids.push_back(token_at(d));
      tg_prompt.append_tokens(ids);
      if (d > 0) {  // fill the cache to depth d (from the previous depth, which is a prefix of it)
        const double t0 = seconds_now();
        ForwardWork work;         // of the chunks prefilled so far, read against the FMA peak
        int64_t counted = 0;      // tokens in `work`
        const Batch::Id id = run(fill, a->chunk, [&](int64_t done, int64_t total) {
          const double s = seconds_now() - t0;
          const int64_t start = d - total;
          while (counted < done) {  // the step just taken: chunks of at most a->chunk rows
            const int64_t rows = std::min<int64_t>(a->chunk, done - counted);
            work += forward_work(cfg, linears, uint64_t(start + counted), uint64_t(rows), cache_type);
            counted += rows;
          }
          const double gflops = work.flops() / s * 1e-9;
          const std::string of_peak =
              bounds.fma_peak_gflops > 0 ? str_cat(" (", std::lround(100 * gflops / bounds.fma_peak_gflops), "% of the FMA peak)") : "";
          std::fprintf(stderr, "\rfilling depth %lld: %lld/%lld tokens, %.0f tok/s, %.0f GFLOP/s%s, ETA %.0f s   ", d,
                       (long long)(start + done), (long long)d, done / s, gflops, of_peak.c_str(),
                       (total - done) / std::max(done / s, 1e-9));
        });
        std::fprintf(stderr, "\n");
        keep_depth(id, fill, d);
      }
      // pp: the p tokens after the depth in one forward pass; tg: n single-token steps after it
      // (the first is the prompt's last token, prefilled alone).
      const Timing pp = time_runs(a->reps, 0, [&] { keep_depth(run(pp_prompt, a->p, {}), pp_prompt, d); }, clock);
      const Timing tg = time_runs(a->reps, 0, [&] {
        const Batch::Id id = run(tg_prompt, 1, {});
        for (int i = 1; i < a->n; ++i) {
          batch.feed(id, {token_at(d + i)});
          const Batch::StepResult r = batch.step();
          if (!r.failed.empty()) fail(r.error);
        }
        keep_depth(id, tg_prompt, d);
      }, clock);
      const double pp_tps = a->p / pp.mean, tg_tps = a->n / tg.mean;
      const double pp_sd = pp_tps * pp.stddev / pp.mean, tg_sd = tg_tps * tg.stddev / tg.mean;
      const ForwardWork pp_work = forward_work(cfg, linears, uint64_t(d), uint64_t(a->p), cache_type);
      ForwardWork tg_work;
      for (int i = 0; i < a->n; ++i) tg_work += forward_work(cfg, linears, uint64_t(d + i), 1, cache_type);
      auto row = [&](const std::string& test, double tps, double sd, const ForwardWork& work, double seconds, bool decode) {
        std::vector<Cell> cells{a->model, threads, a->cache_type, test, d, Cell(tps, "%.2f"), Cell(sd, "%.2f")};
        for (Cell& c : rates(work, seconds, decode)) cells.push_back(std::move(c));
        report.row(std::move(cells));
      };
      row("pp" + std::to_string(a->p), pp_tps, pp_sd, pp_work, pp.mean, false);
      row("tg" + std::to_string(a->n), tg_tps, tg_sd, tg_work, tg.mean, true);
    }
    report.note("GFLOP/s and GB/s: the work the test does by the model's shapes (linears with the top-k experts, "
                "attention over the keys each query sees, MSA index scores; weights in their stored formats, each "
                "distinct expert once per step, and the cache each step reads), over its time. Against the FMA peak "
                "and read bandwidth measured above: pp is bound by the first, tg by the second (GB/s for tg only).");
    report.finish();
  });
}

}  // namespace m3::cli
