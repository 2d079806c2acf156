#include "run_options.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cache_type.h"
#include "m3/error.h"
#include "m3/version.h"
#include "usage.h"

namespace m3::cli {

void add_run_options(CLI::App* cmd, RunOptions& o, const std::string& ctx_help, const std::string& ctx_names) {
  cmd->add_option("-m,--model", o.model, "Model folder (config.json, tokenizer.json, safetensors)")->required();
  cmd->add_option("-t,--threads", o.threads, "Threads (default: one per usable CPU)")->check(NonNegative());
  cmd->add_option(ctx_names, o.ctx_size, ctx_help)->check(NonNegative());
  add_cache_type_option(cmd, o.cache_type);
  cmd->add_option("--cache-type-k", o.cache_type_k, "llama.cpp's -ctk: the K cache type; must equal --cache-type-v (one type here)")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
  cmd->add_option("--cache-type-v", o.cache_type_v, "llama.cpp's -ctv: the V cache type; must equal --cache-type-k")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
  cmd->add_flag("--no-mmap", o.no_mmap, "Read the weights into memory instead of mapping them");
  cmd->add_flag("--mlock", o.mlock, "Lock the weights in RAM (needs a high enough ulimit -l)");
  cmd->add_flag("-v,--verbose", o.verbose, "Print the startup summary and more detail on stderr");
  cmd->add_option("--log-file", o.log_file, "Append everything written to stderr (progress, statistics, logs) to this file");
  cmd->add_option("--n-gpu-layers", o.n_gpu_layers, "llama.cpp's -ngl: accepted and ignored (this engine runs on the CPU)");
}

void start_run(const RunOptions& o) {
  if (!o.log_file.empty()) {
    const int fd = ::open(o.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    M3_CHECK(fd >= 0, o.log_file, ": cannot open the log file: ", std::strerror(errno));
    std::fflush(stderr);
    // Errors still reach the terminal too: main() reports its last line on the saved descriptor.
    keep_terminal_stderr(::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3));
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  if (o.n_gpu_layers > 0)
    std::fprintf(stderr, "m3: note: --n-gpu-layers %d ignored: this engine runs on the CPU\n", o.n_gpu_layers);
}

DType run_cache_type(const RunOptions& o) {
  std::string t = o.cache_type;
  if (!o.cache_type_k.empty() || !o.cache_type_v.empty()) {
    const std::string& k = o.cache_type_k.empty() ? o.cache_type_v : o.cache_type_k;
    const std::string& v = o.cache_type_v.empty() ? o.cache_type_k : o.cache_type_v;
    M3_CHECK(k == v, "-ctk ", k, " and -ctv ", v, " differ: K, V and the index keys share one cache type here (--cache-type)");
    t = k;
  }
  return cache_type_of(t);
}

std::string parameter_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  return buf;
}

void print_startup_summary(const Engine& engine, const RunOptions& o) {
  const ModelInfo& i = engine.info();
  const CpuPathInfo cpu = cpu_path_info();
  std::fprintf(stderr,
               "m3: model %s: %d layers, hidden %lld, vocab %d, %s parameters (%.2f GiB: %s), %s%s, "
               "vision %s, max context %lld\n",
               o.model.c_str(), i.layers, (long long)i.hidden_size, i.vocab_size, parameter_count(i.parameters).c_str(),
               i.weight_bytes / double(1ull << 30), i.weight_dtypes.c_str(), i.weights_mapped ? "mapped" : "read into memory",
               i.weights_locked ? ", locked" : "", i.has_vision ? "yes" : "no", (long long)i.max_position);
  std::fprintf(stderr, "m3: %d threads, CPU path %s (best %s%s), cache type %s, loaded in %.2f s, m3.cpp %s (%s)\n",
               i.threads, cpu.active.c_str(), cpu.best.c_str(), cpu.forced.empty() ? "" : ", M3_CPU set",
               cache_type_name(run_cache_type(o)), i.load_seconds, build_info().version.c_str(), build_info().commit.c_str());
}

std::unique_ptr<Engine> load_engine(const RunOptions& o, bool summary) {
  EngineOptions eo;
  eo.threads = o.threads;
  eo.mmap = !o.no_mmap;
  eo.mlock = o.mlock;
  auto engine = Engine::load(o.model, eo);
  if (summary || o.verbose) print_startup_summary(*engine, o);
  return engine;
}

}  // namespace m3::cli
