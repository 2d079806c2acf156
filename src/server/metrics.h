#pragma once
// Server counters, rendered in the Prometheus text format for GET /metrics.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace m3::server {

class Metrics {
 public:
  void count_request(const std::string& endpoint, int status);
  // One finished generation: prompt tokens (cached ones included), how many came from the
  // prefix cache, tokens generated, and the time spent prefilling / decoding.
  void count_generation(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens,
                        int64_t prefill_tokens, double prefill_seconds, int64_t decode_tokens, double decode_seconds);
  void count_cancelled();
  // One engine step (forward pass): how many sequences it carried and how many token rows.
  void count_step(int64_t sequences, int64_t rows);
  void set_queue(int64_t waiting, int64_t running);
  void set_prefix_cache(int64_t entries, uint64_t bytes);

  std::string render() const;  // text/plain; version=0.0.4

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0, cancelled_ = 0;
  uint64_t prefill_tokens_ = 0, decode_tokens_ = 0;
  uint64_t steps_ = 0, step_sequences_ = 0, step_rows_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  double last_prefill_tps_ = 0, last_decode_tps_ = 0;
  int64_t waiting_ = 0, running_ = 0, cache_entries_ = 0;
  uint64_t cache_bytes_ = 0;
};

}  // namespace m3::server
