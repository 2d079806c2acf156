#pragma once
// Each subcommand of `m3` lives in its own cmd_<name>.cpp and registers itself on the app.
// A registered callback throws m3::Error for bad input; main() prints it as one line, exit 1.
#include <CLI/CLI.hpp>

namespace m3::cli {

void register_make_checkpoint(CLI::App& app);
void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_generate(CLI::App& app);
void register_logits(CLI::App& app);
void register_bench(CLI::App& app);
void register_preprocess(CLI::App& app);
void register_preprocess_video(CLI::App& app);
void register_make_video(CLI::App& app);
void register_video_tokens(CLI::App& app);
void register_serve(CLI::App& app);
void register_chat(CLI::App& app);
void register_quantize(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_grad(CLI::App& app);
void register_train(CLI::App& app);
void register_task_examples(CLI::App& app);

}  // namespace m3::cli
