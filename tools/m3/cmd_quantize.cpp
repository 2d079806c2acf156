// m3 quantize: a checkpoint folder to another with its linear weights in another weight format
// (io/quantize_checkpoint.h; docs/FORMATS.md, "m3 quantize").
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "usage.h"
#include "m3/error.h"
#include "format/weight_format.h"
#include "io/quantize_checkpoint.h"

namespace m3::cli {

namespace {

// "affine4" and "affine8" are mlx-lm's default group of 64.
const WeightFormat* parse_format(const std::string& name, const std::string& flag) {
  if (name == "affine4") return affine_format(4, 64);
  if (name == "affine8") return affine_format(8, 64);
  const WeightFormat* f = find_weight_format(name);
  if (f == nullptr || f == &f16_format())
    fail(flag, ": unknown format '", name,
         "'; expected mxfp8, affine4, affine8, affine<4|8>-g<32|64|128>, bf16 or f32");
  return f;
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / (1 << 20));
  return buf;
}

}  // namespace

void register_quantize(CLI::App& app) {
  struct Args {
    std::string src, dst, format;
    std::vector<std::string> keep, tensor_format;
    double shard_mb = 5000;
    int threads = 0;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("quantize", "Write a checkpoint with its linear weights in another format");
  cmd->add_option("-m,--model", a->src, "Source checkpoint folder (any format the engine loads)")->required();
  cmd->add_option("--out", a->dst, "Output folder")->required();
  cmd->add_option("--format", a->format,
                  "mxfp8 (the official release's layout), affine4 / affine8 (mlx-lm's, groups of 64), "
                  "affine<4|8>-g<32|64|128>, or bf16")
      ->required();
  cmd->add_option("--keep", a->keep, "Keep weights whose tensor name matches this glob as stored (repeatable), "
                                     "e.g. '*.self_attn.index_*'");
  cmd->add_option("--tensor-format", a->tensor_format,
                  "PATTERN=FORMAT: weights matching the glob take FORMAT (repeatable; first match wins), "
                  "e.g. '*.block_sparse_moe.gate.weight=affine8-g64' or '*embed_tokens*=affine8'");
  cmd->add_option("--shard-mb", a->shard_mb, "Safetensors shards of at most this many MB")
      ->check(Positive())->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Threads (default: one per usable CPU)")->check(NonNegative());
  cmd->add_flag("--force", a->force, "Write into an output folder that is not empty");
  cmd->callback([a] {
    QuantizeOptions o;
    o.format = parse_format(a->format, "--format");
    for (const std::string& p : a->keep) o.rules.push_back({p, nullptr});
    for (const std::string& r : a->tensor_format) {
      const size_t eq = r.rfind('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == r.size())
        fail("--tensor-format: expected PATTERN=FORMAT, got '", r, "'");
      o.rules.push_back({r.substr(0, eq), parse_format(r.substr(eq + 1), "--tensor-format")});
    }
    o.max_shard_bytes = uint64_t(a->shard_mb * 1e6);
    o.threads = a->threads;
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(a->dst) && !fs::is_empty(a->dst, ec) && !a->force)
      fail(a->dst, ": the output folder exists and is not empty (--force writes into it)");
    const auto t0 = std::chrono::steady_clock::now();
    const QuantizeReport r = quantize_checkpoint(a->src, a->dst, o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s in %.1f s: %s of tensors from %s (%.2fx)\n", a->dst.c_str(), secs, mib(r.bytes_out).c_str(),
                mib(r.bytes_in).c_str(), r.bytes_out ? double(r.bytes_in) / double(r.bytes_out) : 0.0);
    std::printf("  %llu linears quantized, %llu already in their output format and copied byte for byte\n",
                static_cast<unsigned long long>(r.requantized), static_cast<unsigned long long>(r.copied));
    for (const auto& [name, t] : r.by_format)
      std::printf("  %-13s %6llu linears, %s (%.3f bytes per weight)\n", name.c_str(),
                  static_cast<unsigned long long>(t.linears), mib(t.bytes).c_str(),
                  t.weights ? double(t.bytes) / double(t.weights) : 0.0);
  });
}

}  // namespace m3::cli
