// m3 generate: stream a completion of a prompt, then report prefill and decode speed (also after
// Ctrl-C, which stops the generation: exit 130).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "m3/error.h"
#include "cache_type.h"
#include "commands.h"
#include "sampling_options.h"
#include "read_ids.h"
#include "interrupt.h"
#include "run_options.h"
#include "usage.h"
#include "m3/engine.h"
#include "m3/prompt.h"
#include "m3/session.h"
#include "m3/tokenizer.h"

namespace m3::cli {

void register_generate(CLI::App& app) {
  struct Args {
    RunOptions run;
    std::string prompt, prompt_file;
    std::vector<std::string> images, videos;
    double video_fps = 1.0;
    int n = 64, chunk = 512;
    bool special = false, ignore_eos = false;
    SamplingParams s;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  add_run_options(cmd, a->run, "Context: prompt + generated tokens (default: the model's max_position_embeddings)");
  auto* g = cmd->add_option_group("prompt");
  g->add_option("-p,--prompt", a->prompt, "Prompt text");
  g->add_option("-f,--prompt-file", a->prompt_file, "Read the prompt from a file");
  g->require_option(1);
  cmd->add_option("-n,--max-tokens", a->n, "Tokens to generate")->capture_default_str()->check(NonNegative());
  cmd->add_option("-b,--chunk", a->chunk, "Prefill chunk (tokens per forward pass)")->capture_default_str()->check(Positive());
  add_sampling_options(cmd, a->s);
  cmd->add_option("--image", a->images, "Image file (repeatable; one ]<]image[>[ in the prompt per image, or none: after the text)");
  cmd->add_option("--video", a->videos, "Video file (repeatable; one ]<]video[>[ in the prompt per video, or none: after the text)");
  cmd->add_option("--video-fps", a->video_fps, "Frames sampled per second of video")->capture_default_str()->check(Positive());
  cmd->add_flag("--special", a->special, "Parse special tokens in the prompt (e.g. ]~b]user)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-turn token");
  cmd->callback([a, cmd] {
    start_run(a->run);
    const DType cache_type = run_cache_type(a->run);
    auto engine = load_engine(a->run, false);
    const SamplingParams sampling = resolve_sampling(cmd, a->s, engine->info().default_sampling);
    const std::string text = a->prompt_file.empty() ? a->prompt : read_text_file(a->prompt_file);
    Prompt prompt;
    if (!a->images.empty() || !a->videos.empty()) {
      M3_CHECK(!a->special, "--special cannot be combined with --image/--video");
      MultimodalOptions mo;
      mo.video.fps = a->video_fps;
      prompt = build_multimodal_prompt(*engine, text, a->images, a->videos, mo).prompt;
    } else {
      prompt.append_tokens(engine->tokenizer().encode(text, a->special));
    }
    M3_CHECK(!prompt.empty(), "the prompt is empty");

    GenerationConfig g;
    g.max_tokens = a->n;
    g.sampling = sampling;
    g.sample_vocab = engine->tokenizer().vocab_size();
    g.stop_at_end_of_turn = !a->ignore_eos;

    // Long prefills report progress on stderr: tokens done, tokens/s, ETA.
    const bool show_progress = prompt.size() >= 8192;
    const auto t0 = std::chrono::steady_clock::now();
    SessionCallbacks cb;
    cb.on_prefill = [&](int64_t done, int64_t total) {
      if (!show_progress) return true;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double rate = done / std::max(s, 1e-9);
      std::fprintf(stderr, "\rprefill %lld/%lld tokens, %.1f tok/s, ETA %.0f s   ", (long long)done,
                   (long long)total, rate, (total - done) / std::max(rate, 1e-9));
      if (done == total) std::fprintf(stderr, "\n");
      return true;
    };
    cb.on_text = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
    std::atomic<bool>& stop = install_sigint_flag(SigintMode::StopOnce);
    cb.on_token = [&stop](const TokenEvent&) { return !stop.load(); };
    const auto prefill_progress = cb.on_prefill;
    cb.on_prefill = [&](int64_t done, int64_t total) { return prefill_progress(done, total) && !stop.load(); };
    SessionOptions so;
    so.cache_type = cache_type;
    so.prefill_chunk = a->chunk;
    so.context = a->run.ctx_size;
    Session session(*engine, so);
    const SessionStats stats = session.generate(prompt, g, cb);
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prompt %lld tokens: prefill %.2f s, %.1f tok/s | generated %lld tokens: decode %.1f tok/s | "
                 "threads %d | KV cache %.1f MiB %s%s%s\n",
                 (long long)stats.prompt_tokens, stats.prefill_seconds, stats.prefill_tokens_per_second(),
                 (long long)stats.generated_tokens, stats.decode_tokens_per_second(), engine->info().threads,
                 session.cache_bytes() / 1048576.0, cache_type_name(session.cache_type()),
                 stats.finish == FinishReason::EndOfTurn ? " | stopped at end-of-turn" : "",
                 stats.context_full ? " | stopped: the context is full (-c)" : stats.interrupted ? " | interrupted" : "");
    if (stop.load()) throw Interrupted();
  });
}

}  // namespace m3::cli
