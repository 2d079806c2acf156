#pragma once
// Continuous batching: one engine thread runs up to `parallel` sequences at once in a runtime
// Batch (m3/batch.h: one forward pass per step over the decode rows and prefill chunks, caches from
// the prefix cache). Requests wait in arrival order (FIFO) for a free slot. HTTP threads only
// submit and read their Exchange; the batch (the model, its thread pool and the prefix cache) is
// touched by this thread alone.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "m3/batch.h"
#include "m3/engine.h"
#include "server/generation.h"
#include "server/metrics.h"

namespace m3::server {

struct SchedulerOptions {
  int parallel = 1;   // sequences decoded together
  int chunk = 512;    // tokens per forward pass (decode rows + prefill chunks)
  DType cache_type = DType::BF16;
  uint64_t prefix_cache_bytes = 0;  // --cache-mb
};

class Scheduler {
 public:
  Scheduler(Engine& engine, Metrics& metrics, SchedulerOptions options);
  ~Scheduler();  // finishes the current step; requests still queued or running are dropped (499)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void submit(std::unique_ptr<Generation> generation);
  // The choices of one request (n > 1), queued together so that they are admitted in one step
  // when slots allow (then choice 0's prompt is prefilled once for all).
  void submit(std::vector<std::unique_ptr<Generation>> generations);
  // Shutdown after the grace period: every running and queued request ends at once with a 503
  // (Generation::abort_for_shutdown), and later submissions likewise.
  void abort_all();

 private:
  struct Sequence {
    std::unique_ptr<Generation> gen;
    Batch::Id id = -1;  // in the batch; -1 while waiting for a leader
    bool done = false, cancelled = false;
    std::string error;  // set when the sequence failed; its answer is sent by retire()
    // A later choice of an n > 1 request: it waits (outside the batch) for choice 0 to finish the
    // prompt, then forks its cache and starts decoding from the same logits.
    bool waits_for_leader = false;
  };

  void loop();
  void admit(std::deque<std::unique_ptr<Generation>>& arrivals);
  // Gives s its cache from the prefix cache and starts it; false (and s.error) when that fails.
  bool start_sequence(Sequence& s);
  // The running choice 0 of gen's request while it is still in its prompt, or nullptr.
  const Sequence* leader_in_prefill(const Generation& gen) const;
  // Samples from the sequence's logits and feeds what comes next, or ends it.
  void advance(Sequence& s);
  void run_step();
  void retire();
  void publish_queue();

  Engine& engine_;
  Metrics& metrics_;
  const SchedulerOptions opt_;
  Batch batch_;  // engine thread only

  std::vector<Sequence> running_;  // engine thread only
  std::atomic<int64_t> running_count_{0};  // its size, for the metrics

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Generation>> queue_;
  bool stop_ = false;
  bool abort_ = false;  // abort_all() was called
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace m3::server
