// m3 bench batch: what continuous batching buys in decode. For each batch size B, B sequences
// (each with its own cache filled to depth d) decode n tokens together, one forward pass per step;
// reported as aggregate tokens/s and per-sequence tokens/s, side by side with B = 1 in one run.
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "bench_util.h"
#include "commands.h"
#include "runtime/engine.h"
#include "runtime/prefill.h"

namespace m3::cli {

void register_bench_batch(CLI::App* bench) {
  struct Args {
    std::string model, batches = "1,2,4,8";
    long long depth = 0;
    int n = 32, reps = 3, threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("batch", "Batched decode: B sequences per forward pass (continuous batching)");
  cmd->add_option("-m,--model", a->model, "Model folder")->required();
  cmd->add_option("-B,--batches", a->batches, "Batch sizes, comma-separated")->capture_default_str();
  cmd->add_option("-d,--depth", a->depth, "Tokens already in each sequence's cache")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-n,--gen", a->n, "Decode steps per repetition")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-r,--reps", a->reps, "Repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  cmd->callback([a] {
    std::vector<long long> batches = parse_int_list(a->batches, "--batches");
    auto engine = Engine::load(a->model, a->threads);
    TextModel& model = *engine->model;
    const int V = engine->tokenizer->vocab_size();
    auto token_at = [&](long long seq, long long i) { return int32_t((i * 7919 + seq * 104729 + 13) % V); };
    std::printf("model %s, %d threads, depth %lld, %d decode steps per repetition\n\n", a->model.c_str(),
                engine->pool->size(), a->depth, a->n);
    std::printf("| batch | ms per step | aggregate t/s | t/s per sequence | aggregate vs batch 1 |\n|---|---|---|---|---|\n");
    double base = 0;
    for (long long B : batches) {
      M3_CHECK(B >= 1, "--batches: sizes must be >= 1");
      std::vector<std::unique_ptr<KvCache>> caches;
      std::vector<float> scratch;
      for (long long s = 0; s < B; ++s) {
        caches.push_back(std::make_unique<KvCache>(model.cache_shape()));
        if (a->depth > 0) {
          std::vector<int32_t> fill(static_cast<size_t>(a->depth));
          for (long long i = 0; i < a->depth; ++i) fill[size_t(i)] = token_at(s, i);
          prefill(model, *caches.back(), fill.data(), a->depth, 512, LogitsFor::None, scratch);
        }
      }
      std::vector<std::vector<float>> logits(static_cast<size_t>(B));
      std::vector<int32_t> tok(static_cast<size_t>(B));
      const Timing t = time_runs(a->reps, 1, [&] {
        for (auto& c : caches) c->truncate(a->depth);
        for (int i = 0; i < a->n; ++i) {
          std::vector<BatchInput> in;
          for (long long s = 0; s < B; ++s) {
            tok[size_t(s)] = token_at(s, a->depth + i);
            in.push_back(BatchInput{caches[size_t(s)].get(), &tok[size_t(s)], nullptr, 1, LogitsFor::Last, &logits[size_t(s)]});
          }
          model.forward_batch(in);
        }
      });
      const double agg = double(B) * a->n / t.median;
      if (base == 0) base = agg / double(B) * 1.0;
      std::printf("| %lld | %.2f | %.1f | %.1f | %.2fx |\n", B, 1000.0 * t.median / a->n, agg, agg / double(B),
                  base > 0 ? agg / base : 0.0);
      std::fflush(stdout);
    }
  });
}

}  // namespace m3::cli
