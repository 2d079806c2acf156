#pragma once
// Server counters, rendered in the Prometheus text format for GET /metrics.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace m3::server {

// A Prometheus histogram: cumulative bucket counts at fixed upper bounds, the sum and the count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double v);
  void render(std::string& out, const char* name) const;  // _bucket{le=...}, _sum, _count
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative)
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  Metrics();
  // One finished request's latencies (vLLM's histograms): arrival to first token, each gap
  // between generated tokens, arrival to the end.
  void observe_latencies(double time_to_first_token, const std::vector<double>& inter_token, double e2e);
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
  Histogram ttft_, itl_, e2e_;
};

}  // namespace m3::server
