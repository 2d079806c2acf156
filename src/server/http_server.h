#pragma once
// `m3 serve`: an OpenAI-compatible HTTP server over one loaded model (docs/SERVER.md).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "m3/dtype.h"

namespace m3::server {

struct ServerOptions {
  std::string model_dir;
  std::string model_name;        // id in /v1/models and responses; default: the folder's name
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (printed on stderr)
  int64_t ctx = 0;               // prompt + completion limit; 0: min(32768, max_position_embeddings)
  std::string api_key;           // when set, every path but /health needs "Authorization: Bearer KEY"
  int threads = 0;               // engine threads; 0: all cores
  bool mmap = true;              // false: read the weights into memory (--no-mmap)
  bool mlock = false;            // lock the weights in RAM (--mlock)
  size_t max_body_bytes = 8u << 20;
  DType cache_type = DType::BF16;  // K, V and index-K element type of every sequence (--cache-type)
  uint64_t cache_mb = 2048;      // prefix cache budget (KV pages kept between requests); 0: off
  int prefill_chunk = 512;
  int http_threads = 32;
  int parallel = 1;              // sequences decoded together (continuous batching)
  int timeout_seconds = 60;
  int max_json_depth = 128;      // request bodies nested deeper are refused with 400 (chat/json_depth.h)
  std::string allowed_local_media_path;  // image parts may name files under this folder; empty: data: URLs only
  std::vector<std::string> cors_origins;  // --cors-origin: origins whose pages may call the API ("*": any)
  bool accept_any_model = false;          // true: any "model" name is served (llama-server's way); false: 404
  int shutdown_grace_seconds = 5;         // SIGINT/SIGTERM: in-flight requests get this long to finish
};

// Loads the model, binds, prints "m3 serve: listening on http://HOST:PORT" on stderr and serves.
// SIGINT or SIGTERM stops it gracefully: no new connections, in-flight requests get
// shutdown_grace_seconds to finish and are then ended with a 503 final event, and the process
// exits 0 (a second signal: at once, 1). Throws m3::Error when the model cannot be loaded or the
// port bound.
void run_server(const ServerOptions& options);

}  // namespace m3::server
