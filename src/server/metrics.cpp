#include "server/metrics.h"

#include <cstdio>

namespace m3::server {

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
  return o;
}

}  // namespace m3::server
