// m3 generate: stream a completion of a prompt, then report prefill and decode speed.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "m3/error.h"
#include "cache_type.h"
#include "commands.h"
#include "sampling_options.h"
#include "read_ids.h"
#include "m3/engine.h"
#include "m3/prompt.h"
#include "m3/session.h"
#include "m3/tokenizer.h"

namespace m3::cli {

void register_generate(CLI::App& app) {
  struct Args {
    std::string model, prompt, prompt_file, cache_type = "f32";
    std::vector<std::string> images, videos;
    double video_fps = 1.0;
    int n = 64, threads = 0, chunk = 512;
    bool special = false, ignore_eos = false;
    SamplingParams s;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  cmd->add_option("-m,--model", a->model, "Model folder")->required();
  auto* g = cmd->add_option_group("prompt");
  g->add_option("-p,--prompt", a->prompt, "Prompt text");
  g->add_option("-f,--prompt-file", a->prompt_file, "Read the prompt from a file");
  g->require_option(1);
  cmd->add_option("-n,--max-tokens", a->n, "Tokens to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  add_cache_type_option(cmd, a->cache_type);
  cmd->add_option("-b,--chunk", a->chunk, "Prefill chunk (tokens per forward pass)")->capture_default_str()->check(CLI::PositiveNumber);
  add_sampling_options(cmd, a->s);
  cmd->add_option("--image", a->images, "Image file (repeatable; one ]<]image[>[ in the prompt per image, or none: after the text)");
  cmd->add_option("--video", a->videos, "Video file (repeatable; one ]<]video[>[ in the prompt per video, or none: after the text)");
  cmd->add_option("--video-fps", a->video_fps, "Frames sampled per second of video")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--special", a->special, "Parse special tokens in the prompt (e.g. ]~b]user)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-turn token");
  cmd->callback([a] {
    a->s.validate();
    auto engine = Engine::load(a->model, a->threads);
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
    g.sampling = a->s;
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
    SessionOptions so;
    so.cache_type = cache_type_of(a->cache_type);
    so.prefill_chunk = a->chunk;
    Session session(*engine, so);
    const SessionStats stats = session.generate(prompt, g, cb);
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prompt %lld tokens: prefill %.2f s, %.1f tok/s | generated %lld tokens: decode %.1f tok/s | "
                 "threads %d | KV cache %.1f MiB %s%s\n",
                 (long long)stats.prompt_tokens, stats.prefill_seconds, stats.prefill_tokens_per_second(),
                 (long long)stats.generated_tokens, stats.decode_tokens_per_second(), engine->info().threads,
                 session.cache_bytes() / 1048576.0, cache_type_name(session.cache_type()),
                 stats.finish == FinishReason::EndOfTurn ? " | stopped at end-of-turn" : "");
  });
}

}  // namespace m3::cli
