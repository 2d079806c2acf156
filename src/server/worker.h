#pragma once
// The engine worker: one thread that runs jobs one at a time in arrival order (FIFO). HTTP
// threads only parse requests, enqueue a job and wait for its output, so the model, its thread
// pool and the prefix cache are touched by this thread alone. Batching several sequences per
// forward pass (continuous batching) is future work.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace m3::server {

class Worker {
 public:
  // on_queue_change(waiting, running) is called (on either thread) whenever the queue changes.
  explicit Worker(std::function<void(int64_t, int64_t)> on_queue_change = {});
  ~Worker();  // finishes the running job, drops the waiting ones (their destructors run)
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void submit(std::function<void()> job);
  int64_t waiting() const;

 private:
  void loop();
  void notify_locked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false, stop_ = false;
  std::function<void(int64_t, int64_t)> on_queue_change_;
  std::thread thread_;
};

}  // namespace m3::server
