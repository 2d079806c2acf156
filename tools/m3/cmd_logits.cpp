// m3 logits: the [T, vocab] float32 logits of every position, for validation against the reference.
// --chunk sets the prefill chunk; --decode-from K prefills [0, K) and then runs one token at a time,
// so one-shot prefill, chunked prefill and decode can be compared on the same tokens.
// --image PATH (repeatable, with --text) runs images through the vision tower (spec §5): each
// `]<]image[>[` in the text (or, with none, the end of the text) becomes start-of-image + N image
// tokens + end-of-image, and the N rows take the merged vision embeddings in order.
#include <cstdio>
#include <fstream>

#include "m3/error.h"
#include "cache_type.h"
#include "commands.h"
#include "m3/npy.h"
#include "m3/batch.h"
#include "m3/engine.h"
#include "m3/prompt.h"
#include "m3/tokenizer.h"
#include "read_ids.h"
#include "run_options.h"
#include "usage.h"

namespace m3::cli {

void register_logits(CLI::App& app) {
  struct Args {
    RunOptions run;
    std::string tokens, tokens_file, text, out, vision_out, tokens_out;
    std::vector<std::string> images, videos;
    double video_fps = 1.0;
    std::string vision_rope = "neox";
    int chunk = 0, decode_from = -1;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every position to a .npy file");
  add_run_options(cmd, a->run, "Refuse inputs longer than this many tokens (default: the model's max_position_embeddings)");
  auto* g = cmd->add_option_group("input");
  g->add_option("--tokens", a->tokens, "Token ids, comma-separated");
  g->add_option("--tokens-file", a->tokens_file, "File of token ids");
  g->add_option("--text", a->text, "Text to tokenize (special tokens stay plain text)");
  g->require_option(1);
  cmd->add_option("--out", a->out, "Output .npy file, shape [T, vocab] float32")->required();
  cmd->add_option("--chunk", a->chunk, "Prefill chunk size (default: all tokens in one pass)")->check(Positive());
  cmd->add_option("--decode-from", a->decode_from, "Prefill the first K tokens, then decode one by one")->check(NonNegative());
  cmd->add_option("--image", a->images, "Image file (repeatable; needs --text, one ]<]image[>[ per image or none)");
  cmd->add_option("--video", a->videos, "Video file (repeatable; needs --text, one ]<]video[>[ per video or none)");
  cmd->add_option("--video-fps", a->video_fps, "Frames sampled per second of video")->capture_default_str()->check(Positive());
  cmd->add_option("--vision-out", a->vision_out, "With --image/--video: write the merged vision embeddings [N, hidden] (.npy), items in stream order");
  cmd->add_option("--vision-rope", a->vision_rope,
                  "3D RoPE of the vision tower: neox (spec §5.4, 26/26/26+2) or hf-interleaved (experimental, 26/26/28)")
      ->check(CLI::IsMember({"neox", "hf-interleaved"}))
      ->capture_default_str();
  cmd->add_option("--tokens-out", a->tokens_out, "Write the token ids that were run (comma-separated)");
  cmd->callback([a] {
    start_run(a->run);
    const DType cache_type = run_cache_type(a->run);
    auto engine = load_engine(a->run, false);
    Prompt prompt;
    if (!a->images.empty() || !a->videos.empty()) {
      M3_CHECK(engine->info().has_vision, a->run.model,
               ": --image/--video need a checkpoint with a vision tower, but config.json has no vision_config");
      M3_CHECK(a->tokens.empty() && a->tokens_file.empty(), "--image/--video need --text (not --tokens/--tokens-file)");
      MultimodalOptions mo;
      mo.rope = a->vision_rope == "neox" ? vision::VisionRopeVariant::NeoxPadded : vision::VisionRopeVariant::InterleavedHf;
      mo.video.fps = a->video_fps;
      MultimodalPrompt mm = build_multimodal_prompt(*engine, a->text, a->images, a->videos, mo);
      prompt = std::move(mm.prompt);
      if (!a->vision_out.empty()) {
        std::vector<float> all;
        for (const auto& e : mm.items) all.insert(all.end(), e->features.begin(), e->features.end());
        const int64_t H = engine->info().hidden_size;
        write_npy_f32(a->vision_out, all.data(), {int64_t(all.size()) / H, H});
      }
    } else {
      M3_CHECK(a->vision_out.empty(), "--vision-out needs --image or --video");
      if (!a->tokens.empty()) prompt.append_tokens(parse_ids(a->tokens, "--tokens"));
      else if (!a->tokens_file.empty()) prompt.append_tokens(read_ids_file(a->tokens_file));
      else prompt.append_tokens(engine->tokenizer().encode(a->text));
    }
    const std::vector<int32_t>& ids = prompt.ids();
    M3_CHECK(!ids.empty(), "no tokens to run");
    if (!a->tokens_out.empty()) {
      std::ofstream f(a->tokens_out);
      for (size_t i = 0; i < ids.size(); ++i) f << (i ? "," : "") << ids[i];
      f << "\n";
      M3_CHECK(f.good(), a->tokens_out, ": write failed");
    }
    const int64_t T = prompt.size(), V = engine->info().vocab_size;
    const int64_t max_pos = engine->info().max_position;
    const int64_t ctx = a->run.ctx_size > 0 ? a->run.ctx_size : max_pos;
    M3_CHECK(max_pos <= 0 || a->run.ctx_size <= max_pos, "-c/--ctx-size ", a->run.ctx_size,
             " exceeds the model's max_position_embeddings ", max_pos);
    M3_CHECK(ctx <= 0 || T <= ctx, "the input is ", T, " tokens but the context holds ", ctx, " (-c/--ctx-size)");
    const int64_t K = a->decode_from < 0 ? T : std::min<int64_t>(a->decode_from, T);
    const int chunk = a->chunk > 0 ? a->chunk : int(std::max<int64_t>(K, 1));

    // The whole prompt is one sequence: chunks of `chunk` rows up to K, then one row per step, every
    // row's logits kept.
    BatchOptions bo;
    bo.chunk = int(std::max<int64_t>(T, 1));
    bo.cache_type = cache_type;
    Batch batch(*engine, bo);
    SequenceOptions so;
    so.all_logits = true;
    const Batch::Id id = batch.add(prompt, nullptr, so);
    std::vector<float> all(size_t(T * V));
    for (int64_t i = 0; i < T;) {
      batch.set_max_rows(id, int(i < K ? std::min<int64_t>(chunk, K - i) : 1));
      const Batch::StepResult r = batch.step();
      if (!r.failed.empty()) fail(r.error);
      const int64_t rows = batch.all_logits_rows(id);
      std::copy(batch.all_logits(id), batch.all_logits(id) + rows * V, all.begin() + i * V);
      i += rows;
    }
    write_npy_f32(a->out, all.data(), {T, V});
    std::fprintf(stderr, "wrote %s [%lld, %lld]\n", a->out.c_str(), (long long)T, (long long)V);
  });
}

}  // namespace m3::cli
