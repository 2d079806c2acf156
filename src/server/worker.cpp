#include "server/worker.h"

namespace m3::server {

Worker::Worker(std::function<void(int64_t, int64_t)> on_queue_change)
    : on_queue_change_(std::move(on_queue_change)), thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Worker::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(job));
    notify_locked();
  }
  cv_.notify_one();
}

int64_t Worker::waiting() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int64_t(queue_.size());
}

void Worker::notify_locked() {
  if (on_queue_change_) on_queue_change_(int64_t(queue_.size()), running_ ? 1 : 0);
}

void Worker::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) {
        queue_.clear();
        return;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      notify_locked();
    }
    job();  // jobs catch their own errors
    {
      std::lock_guard<std::mutex> lk(mu_);
      running_ = false;
      notify_locked();
    }
  }
}

}  // namespace m3::server
