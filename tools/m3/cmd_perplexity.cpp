// m3 perplexity: how well a model predicts a text, and (with --kl-base) how far its next-token
// distributions are from a base model's, as llama.cpp's perplexity tool reports them: perplexity
// with its standard error, mean KL divergence, its 99th percentile, and top-1 agreement. This is
// the accuracy measure for quantized checkpoints (docs/FORMATS.md).
//
// The text is tokenized once and cut into chunks of -c tokens; each chunk is a fresh sequence, and
// only its second half is scored, so that every scored token has at least c/2 tokens of context.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "m3/batch.h"
#include "m3/engine.h"
#include "m3/error.h"
#include "m3/prompt.h"
#include "m3/tokenizer.h"
#include "base/read_file.h"
#include "commands.h"
#include "read_ids.h"
#include "run_options.h"
#include "usage.h"

namespace m3::cli {

namespace {

// Logits [n, vocab] of one chunk, run as a fresh sequence in one prefill pass.
std::vector<float> chunk_logits(Engine& engine, DType cache_type, const int32_t* ids, int64_t n) {
  BatchOptions bo;
  bo.chunk = int(n);
  bo.cache_type = cache_type;
  Batch batch(engine, bo);
  SequenceOptions so;
  so.all_logits = true;
  Prompt prompt;
  prompt.append_tokens(std::vector<int32_t>(ids, ids + n));
  const Batch::Id id = batch.add(prompt, nullptr, so);
  const int64_t V = engine.info().vocab_size;
  std::vector<float> out(size_t(n * V));
  for (int64_t i = 0; i < n;) {
    const Batch::StepResult r = batch.step();
    if (!r.failed.empty()) fail(r.error);
    const int64_t rows = batch.all_logits_rows(id);
    std::copy(batch.all_logits(id), batch.all_logits(id) + rows * V, out.begin() + i * V);
    i += rows;
  }
  return out;
}

// log softmax of one row, in double.
void log_softmax(const float* z, int64_t V, std::vector<double>& out) {
  out.resize(size_t(V));
  const double m = *std::max_element(z, z + V);
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(double(z[v]) - m);
  const double lse = m + std::log(s);
  for (int64_t v = 0; v < V; ++v) out[size_t(v)] = double(z[v]) - lse;
}

// Mean and its standard error.
struct Mean {
  double sum = 0, sq = 0;
  int64_t n = 0;
  void add(double x) {
    sum += x;
    sq += x * x;
    ++n;
  }
  double mean() const { return n ? sum / double(n) : 0.0; }
  double stderr_() const {
    if (n < 2) return 0.0;
    const double m = mean(), var = std::max(0.0, (sq - double(n) * m * m) / double(n - 1));
    return std::sqrt(var / double(n));
  }
};

}  // namespace

void register_perplexity(CLI::App& app) {
  struct Args {
    RunOptions run;
    std::string file, tokens_file, kl_base;
    int64_t chunks = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a text, and KL divergence against a base model");
  add_run_options(cmd, a->run, "Tokens per chunk; the second half of each is scored (default 512)");
  auto* g = cmd->add_option_group("input");
  g->add_option("-f,--file", a->file, "Text file to score");
  g->add_option("--tokens-file", a->tokens_file, "File of token ids to score");
  g->require_option(1);
  cmd->add_option("--chunks", a->chunks, "Score at most this many chunks (default: all)")->check(Positive());
  cmd->add_option("--kl-base", a->kl_base,
                  "Base checkpoint (e.g. the bf16 one): also report KL(base || model), its 99th percentile and "
                  "top-1 agreement; both models are loaded");
  cmd->callback([a] {
    start_run(a->run);
    const DType cache_type = run_cache_type(a->run);
    auto engine = load_engine(a->run, false);
    std::unique_ptr<Engine> base;
    if (!a->kl_base.empty()) {
      RunOptions b = a->run;
      b.model = a->kl_base;
      base = load_engine(b, false);
      M3_CHECK(base->info().vocab_size == engine->info().vocab_size, "--kl-base: ", a->kl_base, " has a vocabulary of ",
               base->info().vocab_size, " tokens, ", a->run.model, " of ", engine->info().vocab_size);
    }
    const std::vector<int32_t> ids = a->file.empty() ? read_ids_file(a->tokens_file)
                                                     : engine->tokenizer().encode(read_whole_file(a->file, "text file"));
    const int64_t n_ctx = a->run.ctx_size > 0 ? a->run.ctx_size : 512;
    M3_CHECK(n_ctx >= 4, "-c/--ctx-size: a chunk needs at least 4 tokens, got ", n_ctx);
    const int64_t max_pos = engine->info().max_position;
    M3_CHECK(max_pos <= 0 || n_ctx <= max_pos, "-c/--ctx-size ", n_ctx, " exceeds the model's max_position_embeddings ",
             max_pos);
    int64_t n_chunks = int64_t(ids.size()) / n_ctx;
    M3_CHECK(n_chunks > 0, "the text is ", ids.size(), " tokens; one chunk needs ", n_ctx, " (-c/--ctx-size)");
    if (a->chunks > 0) n_chunks = std::min(n_chunks, a->chunks);
    const int64_t first = n_ctx / 2, V = engine->info().vocab_size;
    std::printf("perplexity: %lld chunks of %lld tokens, scoring the last %lld of each (%lld tokens)\n",
                (long long)n_chunks, (long long)n_ctx, (long long)(n_ctx - first), (long long)(n_chunks * (n_ctx - first)));

    Mean nll, base_nll, kl, same_top;
    std::vector<double> kls;
    std::vector<double> lp, lq;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int32_t* chunk = ids.data() + c * n_ctx;
      const std::vector<float> z = chunk_logits(*engine, cache_type, chunk, n_ctx);
      std::vector<float> zb;
      if (base) zb = chunk_logits(*base, cache_type, chunk, n_ctx);
      // The logits of position i predict token i + 1.
      for (int64_t i = first - 1; i < n_ctx - 1; ++i) {
        log_softmax(z.data() + i * V, V, lq);
        const int32_t next = chunk[i + 1];
        nll.add(-lq[size_t(next)]);
        if (!base) continue;
        log_softmax(zb.data() + i * V, V, lp);
        base_nll.add(-lp[size_t(next)]);
        double d = 0;
        for (int64_t v = 0; v < V; ++v) d += std::exp(lp[size_t(v)]) * (lp[size_t(v)] - lq[size_t(v)]);
        d = std::max(0.0, d);  // rounding can make a zero divergence slightly negative
        kl.add(d);
        kls.push_back(d);
        const int64_t top_p = std::max_element(lp.begin(), lp.end()) - lp.begin();
        const int64_t top_q = std::max_element(lq.begin(), lq.end()) - lq.begin();
        same_top.add(top_p == top_q ? 1.0 : 0.0);
      }
      std::printf("[%lld]%.4f%s", (long long)(c + 1), std::exp(nll.mean()), c + 1 < n_chunks ? "," : "\n");
      std::fflush(stdout);
    }
    const double ppl = std::exp(nll.mean());
    std::printf("PPL                %.4f +/- %.4f\n", ppl, ppl * nll.stderr_());  // delta method
    if (base) {
      const double bppl = std::exp(base_nll.mean());
      std::sort(kls.begin(), kls.end());
      const double p99 = kls[std::min(kls.size() - 1, size_t(std::ceil(0.99 * double(kls.size()))) - 1)];
      std::printf("PPL (base)         %.4f +/- %.4f\n", bppl, bppl * base_nll.stderr_());
      std::printf("PPL ratio          %.5f\n", ppl / bppl);
      std::printf("mean KL            %.6f +/- %.6f\n", kl.mean(), kl.stderr_());
      std::printf("KL 99th percentile %.6f\n", p99);
      std::printf("KL max             %.6f\n", kls.back());
      std::printf("same top token     %.2f%% +/- %.2f%%\n", 100.0 * same_top.mean(), 100.0 * same_top.stderr_());
    }
  });
}

}  // namespace m3::cli
