#pragma once
// The flags every command that runs a model shares (generate, chat, logits, serve), spelt as
// llama.cpp's users type them: -m, -t, -c/--ctx-size, --cache-type (-ctk/-ctv), --no-mmap,
// --mlock, --verbose, --log-file, and -ngl accepted and ignored (a CPU engine). docs/CLI.md.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "cache_type.h"
#include "m3/dtype.h"
#include "m3/engine.h"

namespace m3::cli {

struct RunOptions {
  std::string model;
  int threads = 0;
  int64_t ctx_size = 0;  // 0: the command's default (the model's limit; serve: min(32768, it))
  std::string cache_type = kDefaultCacheType, cache_type_k, cache_type_v;
  bool no_mmap = false, mlock = false, verbose = false;
  std::string log_file;
  int n_gpu_layers = 0;
};

// ctx_help: what -c means for this command, with its default; ctx_names: its names (serve keeps
// its older --ctx too).
void add_run_options(CLI::App* cmd, RunOptions& o, const std::string& ctx_help, const std::string& ctx_names = "-c,--ctx-size");

// After parsing, before anything is printed: sends stderr to --log-file (appending), notes an
// ignored -ngl. Then the resolved cache type (--cache-type, or -ctk/-ctv, which must agree: K, V
// and index-K share one type here).
void start_run(const RunOptions& o);
DType run_cache_type(const RunOptions& o);

// Loads the model with -t, --no-mmap and --mlock; with --verbose (or always, for serve) prints
// the startup summary on stderr: model, parameters, weight types, threads, CPU path, load time.
std::unique_ptr<Engine> load_engine(const RunOptions& o, bool summary);
void print_startup_summary(const Engine& engine, const RunOptions& o);
std::string parameter_count(int64_t n);  // "427.00B", "0.52M"

}  // namespace m3::cli
