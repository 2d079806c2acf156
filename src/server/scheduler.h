#pragma once
// Continuous batching: one engine thread runs up to `parallel` sequences at once. Every step is
// one forward pass over the next token of each decoding sequence plus prefill chunks of newly
// admitted ones (at most `chunk` tokens in all, decode rows first), so a long prompt never stalls
// the streams already running, and each weight matrix is read once per step for all of them.
// Requests wait in arrival order (FIFO) for a free slot. HTTP threads only submit and read their
// Exchange; the model, its thread pool and the prefix cache are touched by this thread alone.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "runtime/prefix_cache.h"

namespace m3::server {

struct SchedulerOptions {
  int parallel = 1;   // sequences decoded together
  int chunk = 512;    // tokens per forward pass (decode rows + prefill chunks)
};

class Scheduler {
 public:
  Scheduler(Engine& engine, PrefixCache& cache, Metrics& metrics, SchedulerOptions options);
  ~Scheduler();  // finishes the current step; requests still queued or running are dropped (499)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void submit(std::unique_ptr<Generation> generation);
  // The choices of one request (n > 1), queued together so that they are admitted in one step
  // when slots allow (then choice 0's prompt is prefilled once for all).
  void submit(std::vector<std::unique_ptr<Generation>> generations);

 private:
  struct Sequence {
    std::unique_ptr<Generation> gen;
    std::unique_ptr<KvCache> cache;
    std::vector<int32_t> pending;  // tokens not yet fed: the prompt's uncached rest, then each step's new tokens
    bool decoding = false;         // the prompt is done
    size_t fed = 0;                // of pending
    int64_t reused = 0;            // prompt tokens the prefix cache had: pending[0] is prompt position `reused`
    bool media_rows = false;       // the prompt's uncached rest has images: it goes in as input rows
    std::vector<float> rows;       // the input rows of this step's chunk
    std::vector<float> logits;
    bool done = false, cancelled = false;
    std::string error;  // set when the sequence failed; its answer is sent by retire()
    // A later choice of an n > 1 request: it waits (without a cache) for choice 0 to finish the
    // prompt, then copies that cache and starts decoding from the same logits.
    bool waits_for_leader = false;
  };

  void loop();
  void admit(std::deque<std::unique_ptr<Generation>>& arrivals);
  // Gives s its cache from the prefix cache and starts it; false (and s.error) when that fails.
  bool start_sequence(Sequence& s);
  // The running choice 0 of gen's request while it is still in its prompt, or nullptr.
  const Sequence* leader_in_prefill(const Generation& gen) const;
  // Samples from s.logits and sets what s feeds next, or ends it.
  void advance(Sequence& s);
  void run_step();
  void retire();
  void publish_queue();

  Engine& engine_;
  PrefixCache& cache_;
  Metrics& metrics_;
  const SchedulerOptions opt_;

  std::vector<Sequence> running_;  // engine thread only
  std::atomic<int64_t> running_count_{0};  // its size, for the metrics

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Generation>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace m3::server
