// m3 task-examples: held-out examples of a synthetic long-context task (passkey, multikey,
// associative-recall), one JSON object per line with the prompt, the expected answer and the
// prompt's token count, from the generator `m3 train` trains on (src/train/synthetic_tasks.h).
// scripts/eval_task.py feeds the prompts to `m3 generate` and scores the answers.
#include <cstdio>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "m3/error.h"
#include "m3/tokenizer.h"
#include "train/synthetic_tasks.h"
#include "usage.h"

namespace m3::cli {

void register_task_examples(CLI::App& app) {
  struct Args {
    std::string model, task = "passkey";
    int64_t tokens = 1024, count = 20;
    uint64_t seed = 1;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("task-examples", "Print synthetic long-context task examples (JSONL)");
  cmd->add_option("-m,--model", a->model, "Model folder (its tokenizer sizes the examples)")->required();
  cmd->add_option("--task", a->task, "passkey, multikey or associative-recall")->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "Prompt length in tokens (about)")->capture_default_str()->check(Positive());
  cmd->add_option("--count", a->count, "Examples")->capture_default_str()->check(Positive());
  cmd->add_option("--seed", a->seed, "Seed (m3 train's held-out examples use their own stream)")->capture_default_str();
  cmd->callback([a] {
    const auto tok = Tokenizer::from_file((std::filesystem::path(a->model) / "tokenizer.json").string());
    const train::TaskGenerator gen(train::parse_task_kind(a->task), *tok, a->tokens);
    std::mt19937_64 rng(a->seed);
    for (int64_t i = 0; i < a->count; ++i) {
      const train::TaskExample ex = gen.make(rng);
      const nlohmann::json j = {{"prompt", ex.prompt}, {"answer", ex.answer},
                                {"prompt_tokens", tok->encode(ex.prompt).size()}};
      std::printf("%s\n", j.dump().c_str());
    }
  });
}

}  // namespace m3::cli
