// m3 train --config recipe.json: train an M3-architecture model in the engine (docs/TRAINING.md).
// The usual flags override the recipe. A preset model ({"model": {"preset": "tiny", ...}}) is made
// first in <out>/init with the fixtures' tokenizer, as `m3 make-checkpoint` makes it.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "m3/error.h"
#include "base/thread_pool.h"
#include "fixtures/random_checkpoint.h"
#include "train/dataset.h"
#include "train/loss_plot.h"
#include "train/trainer.h"
#include "usage.h"

namespace m3::cli {

namespace {

std::string duration(double s) {
  char b[32];
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(b, sizeof b, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else std::snprintf(b, sizeof b, "%ldm%02lds", t / 60, t % 60);
  return b;
}

void print_progress(const train::Progress& p, bool tty) {
  const int width = 24;
  const int filled = int(double(width) * double(p.step) / double(p.steps));
  std::string bar(size_t(filled), '=');
  if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
  char line[200];
  std::snprintf(line, sizeof line, "step %lld/%lld [%s] loss %.4f | %s | %.0f tok/s | %s elapsed, ETA %s",
                (long long)p.step, (long long)p.steps, bar.c_str(), p.loss, p.dense ? "dense" : "msa", p.tokens_per_s,
                duration(p.elapsed_s).c_str(), duration(p.eta_s).c_str());
  if (tty) std::fprintf(stderr, "\r%s\033[K", line);
  else std::fprintf(stderr, "%s\n", line);
  if (tty && p.step == p.steps) std::fprintf(stderr, "\n");
}

}  // namespace

void register_train(CLI::App& app) {
  struct Args {
    std::string config, resume, out, attention, plot;
    int64_t steps = 0, batch = 0, seq = 0, eval_every = 0, checkpoint_every = -1, dense_warmup = -1;
    double lr = -1;
    int threads = -1;
    int64_t seed = -1;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model from a recipe (docs/TRAINING.md)");
  cmd->add_option("--config", a->config, "Recipe (JSON)");
  cmd->add_option("--plot", a->plot, "Only redraw RUN/loss.png from RUN/log.jsonl (no training)");
  cmd->add_option("--resume", a->resume, "Continue from a checkpoint folder of this run (<out>/checkpoint-N)");
  cmd->add_option("--out", a->out, "Run folder (overrides the recipe's out)");
  cmd->add_option("--steps", a->steps, "Optimizer steps")->check(Positive());
  cmd->add_option("--lr", a->lr, "Peak learning rate")->check(NonNegative());
  cmd->add_option("-b,--batch-size", a->batch, "Sequences per micro-batch")->check(Positive());
  cmd->add_option("--seq-len", a->seq, "Tokens per sequence")->check(Positive());
  cmd->add_option("--eval-every", a->eval_every, "Evaluate on the held-out split every N steps")->check(Positive());
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "Write a checkpoint every N steps (0: at the end only)")
      ->check(NonNegative());
  cmd->add_option("--attention", a->attention, "msa, or dense (the dense-attention baseline)")
      ->check(CLI::IsMember({"msa", "dense"}));
  cmd->add_option("--dense-warmup-steps", a->dense_warmup, "Steps of the MSA dense warm-up")->check(NonNegative());
  cmd->add_option("--seed", a->seed, "Seed of the initialization and the data order")->check(NonNegative());
  cmd->add_option("-t,--threads", a->threads, "Threads (default: the recipe's, else one per usable CPU)")->check(NonNegative());
  cmd->callback([a] {
    if (!a->plot.empty()) {
      std::string why;
      const std::string png = (std::filesystem::path(a->plot) / "loss.png").string();
      M3_CHECK(train::write_loss_plot((std::filesystem::path(a->plot) / "log.jsonl").string(), png, why), png, ": ", why);
      std::fprintf(stderr, "wrote %s\n", png.c_str());
      return;
    }
    M3_CHECK(!a->config.empty(), "m3 train needs --config recipe.json (or --plot RUN)");
    train::Recipe r = train::read_recipe(a->config);
    if (!a->out.empty()) r.out = a->out;
    if (a->steps > 0) r.steps = a->steps;
    if (a->lr >= 0) r.optimizer.lr = a->lr;
    if (a->batch > 0) r.batch_size = a->batch;
    if (a->seq > 0) r.seq_len = a->seq;
    if (a->eval_every > 0) r.eval_every = a->eval_every;
    if (a->checkpoint_every >= 0) r.checkpoint_every = a->checkpoint_every;
    if (!a->attention.empty()) r.attention = a->attention;
    if (a->dense_warmup >= 0) r.dense_warmup_steps = a->dense_warmup;
    if (a->seed >= 0) r.seed = uint64_t(a->seed);
    if (a->threads >= 0) r.threads = a->threads;
    train::validate_recipe(r);
    if (!r.model.preset.empty()) {
      RandomCheckpointOptions o;
      o.preset = r.model.preset;
      o.seed = r.model.seed;
      o.layers = r.model.layers;
      o.block_size = r.model.block_size;
      o.topk = r.model.topk;
      o.text_config_overrides = r.model.config;
      o.overrides_source = r.source + ": model.config";
      if (r.model.tokenizer_merges > 0) {
        // A new vocabulary from the training text (at most 8 MB of it: merges settle long before).
        M3_CHECK(!r.files.empty(), r.source, ": model.tokenizer_merges learns from data.files, which is empty");
        for (const std::string& d : train::read_documents(r.files)) {
          o.tokenizer_text += d;
          if (o.tokenizer_text.size() > (size_t(8) << 20)) break;
        }
        o.tokenizer_merges = r.model.tokenizer_merges;
        std::fprintf(stderr, "m3 train: learning %d BPE merges from %.1f MB of the training text\n",
                     o.tokenizer_merges, double(o.tokenizer_text.size()) / 1e6);
      }
      o.out_dir = (std::filesystem::path(r.out) / "init").string();
      make_random_checkpoint(o);
      r.model.dir = o.out_dir;
    }
    ThreadPool pool(r.threads);
    const bool tty = isatty(2);
    train::TrainHooks hooks;
    const int64_t every = std::max<int64_t>(1, r.steps / 20);
    hooks.progress = [tty, every](const train::Progress& p) {
      if (tty || p.step % every == 0 || p.step == p.steps) print_progress(p, tty);
    };
    hooks.message = [tty](const std::string& s) { std::fprintf(stderr, "%s%s\n", tty ? "\r\033[K" : "", s.c_str()); };
    std::fprintf(stderr, "m3 train: %s -> %s (%d threads)\n", a->config.c_str(), r.out.c_str(), pool.size());
    train::run_training(r, a->resume, pool, hooks);
  });
}

}  // namespace m3::cli
