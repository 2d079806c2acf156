#include "server/metrics.h"

#include <cstdio>

namespace m3::server {

void Histogram::observe(double v) {
  ++count_;
  sum_ += v;
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (v <= bounds_[i]) {
      ++counts_[i];
      return;
    }
}

void Histogram::render(std::string& out, const char* name) const {
  char buf[160];
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::snprintf(buf, sizeof buf, "%s_bucket{le=\"%g\"} %llu\n", name, bounds_[i], (unsigned long long)cumulative);
    out += buf;
  }
  // One line per snprintf: the names are long (vLLM's), and a line must never be cut.
  std::snprintf(buf, sizeof buf, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)count_);
  out += buf;
  std::snprintf(buf, sizeof buf, "%s_sum %.17g\n", name, sum_);
  out += buf;
  std::snprintf(buf, sizeof buf, "%s_count %llu\n", name, (unsigned long long)count_);
  out += buf;
}

// vLLM's bucket bounds for the same histograms, so that dashboards built for it read these.
Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
            960.0, 1920.0, 7680.0}) {}

void Metrics::observe_latencies(double time_to_first_token, const std::vector<double>& inter_token, double e2e) {
  std::lock_guard<std::mutex> lk(mu_);
  if (time_to_first_token >= 0) ttft_.observe(time_to_first_token);
  for (double g : inter_token) itl_.observe(g);
  e2e_.observe(e2e);
}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::count_generation(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens,
                               int64_t prefill_tokens, double prefill_seconds, int64_t decode_tokens,
                               double decode_seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  prompt_tokens_ += uint64_t(prompt_tokens);
  cached_tokens_ += uint64_t(cached_tokens);
  completion_tokens_ += uint64_t(completion_tokens);
  prefill_tokens_ += uint64_t(prefill_tokens);
  decode_tokens_ += uint64_t(decode_tokens);
  prefill_seconds_ += prefill_seconds;
  decode_seconds_ += decode_seconds;
  if (prefill_seconds > 0 && prefill_tokens > 0) last_prefill_tps_ = prefill_tokens / prefill_seconds;
  if (decode_seconds > 0 && decode_tokens > 0) last_decode_tps_ = decode_tokens / decode_seconds;
}

void Metrics::count_cancelled() {
  std::lock_guard<std::mutex> lk(mu_);
  ++cancelled_;
}

void Metrics::count_step(int64_t sequences, int64_t rows) {
  std::lock_guard<std::mutex> lk(mu_);
  ++steps_;
  step_sequences_ += uint64_t(sequences);
  step_rows_ += uint64_t(rows);
}

void Metrics::set_queue(int64_t waiting, int64_t running) {
  std::lock_guard<std::mutex> lk(mu_);
  waiting_ = waiting;
  running_ = running;
}

void Metrics::set_prefix_cache(int64_t entries, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  cache_entries_ = entries;
  cache_bytes_ = bytes;
}

namespace {
void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}
void value(std::string& out, const char* name, double v, const std::string& labels = {}) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += ' ';
  out += buf;
  out += '\n';
}
}  // namespace

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string o;
  metric(o, "m3_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, n] : requests_)
    value(o, "m3_requests_total", double(n), "endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"");
  metric(o, "m3_prompt_tokens_total", "counter", "Prompt tokens of finished generations (cached ones included).");
  value(o, "m3_prompt_tokens_total", double(prompt_tokens_));
  metric(o, "m3_cached_prompt_tokens_total", "counter", "Prompt tokens reused from the prefix cache.");
  value(o, "m3_cached_prompt_tokens_total", double(cached_tokens_));
  metric(o, "m3_completion_tokens_total", "counter", "Generated tokens.");
  value(o, "m3_completion_tokens_total", double(completion_tokens_));
  metric(o, "m3_cancelled_total", "counter", "Generations cancelled because the client went away.");
  value(o, "m3_cancelled_total", double(cancelled_));
  metric(o, "m3_prefill_tokens_total", "counter", "Tokens prefilled (prompt tokens not found in the prefix cache).");
  value(o, "m3_prefill_tokens_total", double(prefill_tokens_));
  metric(o, "m3_prefill_seconds_total", "counter", "Time spent prefilling.");
  value(o, "m3_prefill_seconds_total", prefill_seconds_);
  metric(o, "m3_decode_tokens_total", "counter", "Tokens decoded after the first one (one forward pass each).");
  value(o, "m3_decode_tokens_total", double(decode_tokens_));
  metric(o, "m3_decode_seconds_total", "counter", "Time spent decoding.");
  value(o, "m3_decode_seconds_total", decode_seconds_);
  metric(o, "m3_prefill_tokens_per_second", "gauge", "Prefill speed of the last generation.");
  value(o, "m3_prefill_tokens_per_second", last_prefill_tps_);
  metric(o, "m3_decode_tokens_per_second", "gauge", "Decode speed of the last generation.");
  value(o, "m3_decode_tokens_per_second", last_decode_tps_);
  metric(o, "m3_engine_steps_total", "counter", "Forward passes of the engine (continuous batching steps).");
  value(o, "m3_engine_steps_total", double(steps_));
  metric(o, "m3_engine_step_sequences_total", "counter", "Sequences carried by those passes (/ steps = mean batch).");
  value(o, "m3_engine_step_sequences_total", double(step_sequences_));
  metric(o, "m3_engine_step_rows_total", "counter", "Token rows carried by those passes (decode tokens + prefill chunks).");
  value(o, "m3_engine_step_rows_total", double(step_rows_));
  metric(o, "m3_queue_length", "gauge", "Requests waiting for a free sequence slot (--parallel).");
  value(o, "m3_queue_length", double(waiting_));
  metric(o, "m3_requests_running", "gauge", "Requests holding a sequence slot (at most --parallel).");
  value(o, "m3_requests_running", double(running_));
  metric(o, "m3_prefix_cache_entries", "gauge", "Sequences held by the prefix cache.");
  value(o, "m3_prefix_cache_entries", double(cache_entries_));
  metric(o, "m3_prefix_cache_bytes", "gauge", "Memory of the KV pages held by the prefix cache.");
  value(o, "m3_prefix_cache_bytes", double(cache_bytes_));
  // vLLM's names, so that its dashboards and alerts work unchanged.
  metric(o, "vllm:time_to_first_token_seconds", "histogram", "Time from the request's arrival to its first generated token.");
  ttft_.render(o, "vllm:time_to_first_token_seconds");
  metric(o, "vllm:inter_token_latency_seconds", "histogram", "Time between consecutive generated tokens of a request.");
  itl_.render(o, "vllm:inter_token_latency_seconds");
  metric(o, "vllm:e2e_request_latency_seconds", "histogram", "Time from the request's arrival to its last token.");
  e2e_.render(o, "vllm:e2e_request_latency_seconds");
  return o;
}

}  // namespace m3::server
