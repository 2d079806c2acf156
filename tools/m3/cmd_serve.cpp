// m3 serve: an OpenAI-compatible HTTP server (docs/SERVER.md).
#include <cstdlib>  // defines __GLIBC__ on glibc
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "m3/error.h"
#include "cache_type.h"
#include "commands.h"
#include "m3/chat/json_depth.h"
#include "read_ids.h"
#include "run_options.h"
#include "server/http_server.h"
#include "usage.h"

namespace m3::cli {

namespace {

// glibc raises its mmap threshold to the size of each large block that is freed (up to 32 MiB),
// and its trim threshold to twice that, so after a few large request bodies every later one of
// that size is carved from a per-thread arena and stays resident once freed: rounds of 24
// concurrent 7 MiB bodies left the server at 190 MiB instead of 35 (docs/SOAK.md). Fixed
// thresholds keep blocks of 1 MiB and more (bodies, parsed strings, image rows) in their own
// mappings, returned to the system on free, and trim arena tops past 128 KiB. 1 MiB, not lower:
// M3's f32 KV page (one 128-token block of one layer) is 512 KiB, and a mapping per page would be
// a system call per page and up to ~500K mappings at 1M tokens (vm.max_map_count is 65530).
void bound_allocator_retention() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
#endif
}

}  // namespace

void register_serve(CLI::App& app) {
  auto o = std::make_shared<server::ServerOptions>();
  auto run = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  add_run_options(cmd, *run, "Context: prompt + completion tokens (default: min(32768, max_position_embeddings))",
                  "-c,--ctx-size,--ctx");
  cmd->add_option("--host", o->host, "Address to bind (loopback by default)")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port, printed on stderr)")->capture_default_str()->check(InRange(0, 65535));
  cmd->add_option("--api-key", o->api_key, "Require \"Authorization: Bearer KEY\" on every path but /health (also: M3_API_KEY)");
  auto key_file = std::make_shared<std::string>();
  cmd->add_option("--api-key-file", *key_file, "Read the API key from this file (its first line), so it is not in the process list");
  cmd->add_option("--cors-origin", o->cors_origins,
                  "Origin whose web pages may call the API, e.g. http://localhost:3000 (repeatable; * for any). "
                  "Default: none but the server's own");
  cmd->add_flag("--accept-any-model", o->accept_any_model, "Serve requests whatever \"model\" they name (default: 404 for another name)");
  cmd->add_option("--shutdown-grace", o->shutdown_grace_seconds,
                  "Seconds in-flight requests get to finish after SIGINT/SIGTERM, before they are ended with a 503 event")
      ->capture_default_str()->check(InRange(0, 3600));
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "Largest request body accepted (413 beyond)")->capture_default_str()
      ->check(Positive());
  cmd->add_option("--max-json-depth", o->max_json_depth, "Deepest nesting of arrays/objects a request body may have (400 beyond)")
      ->capture_default_str()->check(InRange(1, chat::kMaxJsonDepthLimit));
  cmd->add_option("--cache-mb", o->cache_mb, "Prefix cache budget in MiB (KV of recent sequences; 0: off)")->capture_default_str();
  cmd->add_option("-b,--chunk", o->prefill_chunk, "Prefill chunk (tokens per forward pass)")->capture_default_str()
      ->check(Positive());
  cmd->add_option("--alias", o->model_name, "Model id reported by /v1/models (default: the folder name)");
  cmd->add_option("--parallel", o->parallel, "Sequences decoded together (continuous batching); more wait in a FIFO queue")
      ->capture_default_str()->check(InRange(1, 256));
  cmd->add_option("--timeout", o->timeout_seconds, "Seconds a client may stall sending its request or reading the response")
      ->capture_default_str()->check(InRange(1, 86400));
  cmd->add_option("--allowed-local-media-path", o->allowed_local_media_path,
                  "Image parts may name local files under this folder (default: only data: URLs)");
  cmd->add_option("--http-threads", o->http_threads, "HTTP connection threads")->capture_default_str()->check(Positive());
  cmd->callback([o, run, key_file] {
    start_run(*run);
    if (o->api_key.empty() && !key_file->empty()) {
      std::string key = read_text_file(*key_file);
      key = key.substr(0, key.find_first_of("\r\n"));
      M3_CHECK(!key.empty(), *key_file, ": the first line is empty (expected the API key)");
      o->api_key = key;
    }
    if (o->api_key.empty())
      if (const char* env = std::getenv("M3_API_KEY"); env != nullptr && *env != '\0') o->api_key = env;
    o->model_dir = run->model;
    o->threads = run->threads;
    o->ctx = run->ctx_size;
    o->cache_type = run_cache_type(*run);
    o->mmap = !run->no_mmap;
    o->mlock = run->mlock;
    bound_allocator_retention();
    server::run_server(*o);
  });
}

}  // namespace m3::cli
