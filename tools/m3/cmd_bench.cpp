// m3 bench: llama-bench-style throughput of the whole model. For each depth d the cache is first
// filled with d tokens; then pp = prefill of p tokens at depth d, tg = n single-token decode steps
// at depth d (the cache is cut back to d between repetitions). The fill text is one fixed token
// sequence, so every depth is a prefix of the next: one cache is cut back and filled on from the
// previous depth (cutting a cache is exact), instead of prefilling each depth from zero.
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "bench_util.h"
#include "cache_type.h"
#include "commands.h"
#include "runtime/engine.h"
#include "runtime/prefill.h"

namespace m3::cli {

void register_bench_attention(CLI::App* bench);
void register_bench_matmul(CLI::App* bench);
void register_bench_batch(CLI::App* bench);
void register_bench_vision(CLI::App* bench);
void register_bench_gemm_libs(CLI::App* bench);
void register_bench_json(CLI::App* bench);

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
    std::string model, depths = "0,16384,65536", cache_type = "f32", clock = "wall";
    int p = 512, n = 128, reps = 3, threads = 0, chunk = 512;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmarks: whole model (-m), `bench attention` or `bench matmul`");
  cmd->require_subcommand(0, 1);
  cmd->add_option("-m,--model", a->model, "Model folder");
  cmd->add_option("-p,--prompt", a->p, "Prefill tokens per pp test")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-n,--gen", a->n, "Decode steps per tg test")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-d,--depths", a->depths, "Context depths, comma-separated")->capture_default_str();
  cmd->add_option("-r,--reps", a->reps, "Repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-b,--chunk", a->chunk, "Prefill chunk when filling the depth")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  add_cache_type_option(cmd, a->cache_type);
  cmd->add_option("--clock", a->clock, "wall, or cpu: process CPU time / threads (on a busy machine)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print JSON lines instead of a markdown table");
  register_bench_attention(cmd);
  register_bench_matmul(cmd);
  register_bench_batch(cmd);
  register_bench_vision(cmd);
  register_bench_gemm_libs(cmd);
  register_bench_json(cmd);
  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;  // a bench subcommand ran
    M3_CHECK(!a->model.empty(), "bench: give a model folder with -m, or a subcommand (bench attention, bench matmul)");
    const std::vector<long long> depths = parse_int_list(a->depths, "--depths");
    auto engine = Engine::load(a->model, a->threads);
    TextModel& model = *engine->model;
    const BenchClock clock{a->clock == "cpu", engine->pool->size()};
    const int V = engine->tokenizer->vocab_size();
    auto token_at = [&](long long i) { return int32_t((i * 7919 + 13) % V); };  // arbitrary but fixed text
    if (!a->json) {
      std::printf("| model | threads | cache | test | depth | t/s |\n|---|---|---|---|---|---|\n");
    }
    KvCacheShape cache_shape = model.cache_shape();
    cache_shape.dtype = cache_type_of(a->cache_type);
    KvCache cache(cache_shape);
    int64_t filled = 0;  // cache positions [0, filled) hold the fill text
    for (long long d : depths) {
      std::vector<int32_t> fill, prompt(static_cast<size_t>(a->p));
      filled = std::min<int64_t>(filled, d);
      cache.truncate(filled);
      for (long long i = filled; i < d; ++i) fill.push_back(token_at(i));
      for (int i = 0; i < a->p; ++i) prompt[size_t(i)] = token_at(d + i);
      std::vector<float> logits;
      const double t0 = seconds_now();
      if (!fill.empty()) {
        prefill(model, cache, fill.data(), int64_t(fill.size()), a->chunk, LogitsFor::None, logits,
                [&](int64_t done, int64_t total) {
                  const double s = seconds_now() - t0;
                  std::fprintf(stderr, "\rfilling depth %lld: %lld/%lld tokens, %.0f tok/s, ETA %.0f s   ", d,
                               (long long)(filled + done), (long long)d, done / s,
                               (total - done) / std::max(done / s, 1e-9));
                });
        std::fprintf(stderr, "\n");
      }
      filled = d;
      const Timing pp = time_runs(a->reps, 0, [&] {
        cache.truncate(d);
        prefill(model, cache, prompt.data(), a->p, a->p, LogitsFor::Last, logits);
      }, clock);
      const Timing tg = time_runs(a->reps, 0, [&] {
        cache.truncate(d);
        int32_t tok = token_at(d);
        for (int i = 0; i < a->n; ++i) {
          model.forward(cache, &tok, 1, LogitsFor::Last, logits);
          tok = token_at(d + i + 1);
        }
      }, clock);
      const double pp_tps = a->p / pp.mean, tg_tps = a->n / tg.mean;
      const double pp_sd = pp_tps * pp.stddev / pp.mean, tg_sd = tg_tps * tg.stddev / tg.mean;
      if (a->json) {
        std::printf("{\"model\": \"%s\", \"threads\": %d, \"cache\": \"%s\", \"test\": \"pp%d\", \"depth\": %lld, \"tps\": %.2f, \"tps_sd\": %.2f}\n",
                    a->model.c_str(), engine->pool->size(), a->cache_type.c_str(), a->p, d, pp_tps, pp_sd);
        std::printf("{\"model\": \"%s\", \"threads\": %d, \"cache\": \"%s\", \"test\": \"tg%d\", \"depth\": %lld, \"tps\": %.2f, \"tps_sd\": %.2f}\n",
                    a->model.c_str(), engine->pool->size(), a->cache_type.c_str(), a->n, d, tg_tps, tg_sd);
      } else {
        std::printf("| %s | %d | %s | pp%d | %lld | %.1f ± %.1f |\n", a->model.c_str(), engine->pool->size(), a->cache_type.c_str(), a->p, d, pp_tps, pp_sd);
        std::printf("| %s | %d | %s | tg%d | %lld | %.1f ± %.1f |\n", a->model.c_str(), engine->pool->size(), a->cache_type.c_str(), a->n, d, tg_tps, tg_sd);
      }
      std::fflush(stdout);
    }
  });
}

}  // namespace m3::cli
