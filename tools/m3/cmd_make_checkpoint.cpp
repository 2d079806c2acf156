// m3 make-checkpoint: a random, seeded checkpoint in the real M3 layout.
#include <cstdio>

#include "commands.h"
#include "usage.h"
#include "m3/error.h"
#include "base/read_file.h"
#include "fixtures/random_checkpoint.h"

namespace m3::cli {

void register_make_checkpoint(CLI::App& app) {
  auto opt = std::make_shared<RandomCheckpointOptions>();
  auto block = std::make_shared<int>(0), topk = std::make_shared<int>(0), layers = std::make_shared<int>(0);
  auto shard_mb = std::make_shared<double>(0.0);
  auto corpus = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("make-checkpoint", "Write a random checkpoint (config.json, tokenizer.json, safetensors)");
  cmd->add_option("--preset", opt->preset, "tiny | small | m3-slice | tiny-vl | small-vl")->check(CLI::IsMember(preset_names()))->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Random seed")->capture_default_str();
  cmd->add_option("--out", opt->out_dir, "Output folder")->required();
  cmd->add_option("--block-size", *block, "Override the MSA block size")->check(InRange(1, 1 << 20));
  cmd->add_option("--topk", *topk, "Override the MSA top-k blocks")->check(InRange(2, 1 << 20));
  cmd->add_option("--layers", *layers, "Override the layer count (layer 0 dense, the rest MSA + MoE)")->check(InRange(1, 1024));
  cmd->add_option("--shard-mb", *shard_mb, "Split into safetensors shards of at most this many MB");
  cmd->add_option("--weights", opt->weights, "bf16, or mxfp8: the text layers' linears in the official MXFP8 release's layout")
      ->check(CLI::IsMember({"bf16", "mxfp8"}))->capture_default_str();
  cmd->add_option("--tokenizer-corpus", *corpus, "Learn the tokenizer's merges from this text file (a new vocabulary)");
  cmd->add_option("--tokenizer-merges", opt->tokenizer_merges, "BPE merges to learn from --tokenizer-corpus")
      ->check(InRange(1, 100000));
  cmd->callback([=] {
    M3_CHECK(corpus->empty() == (opt->tokenizer_merges == 0), "--tokenizer-corpus and --tokenizer-merges go together");
    if (!corpus->empty()) opt->tokenizer_text = read_whole_file(*corpus, "tokenizer corpus");
    if (*block) opt->block_size = *block;
    if (*topk) opt->topk = *topk;
    if (*layers) opt->layers = *layers;
    opt->max_shard_bytes = uint64_t(*shard_mb * 1e6);
    make_random_checkpoint(*opt);
    std::printf("wrote %s (preset %s, seed %llu)\n", opt->out_dir.c_str(), opt->preset.c_str(),
                static_cast<unsigned long long>(opt->seed));
  });
}

}  // namespace m3::cli
