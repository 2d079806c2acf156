#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/usable_cpus.h"

namespace m3 {

namespace {

// How long an idle thread polls before it sleeps. Long enough to bridge the serial stretches
// between the parallel loops of one forward pass, short enough not to hold a core between requests.
constexpr auto kSpin = std::chrono::microseconds(200);

// Polls until done() or the spin time is over; true if done. The poller yields its CPU between
// polls instead of pausing on it: when the thread it waits for shares that CPU (a woken worker
// placed beside its waker by the scheduler, or fewer CPUs than threads), a pausing poller holds
// the CPU for the whole spin time, and 5 of 46 process starts decoded 20-30x slower
// on a 2-CPU guest (docs/BENCHMARKS.md §0s). Yielding costs a system call per poll: the tiny
// preset's decode, whose parallel loops last microseconds, lost ~15% on that guest; models of
// M3's widths lost nothing.
template <class Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    std::this_thread::yield();
    if (i % 16 == 0 && std::chrono::steady_clock::now() > until) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = usable_cpus();
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_part(int part) {
  const int64_t begin = n_ * part / parts_, end = n_ * (part + 1) / parts_;
  if (begin >= end) return;
  try {
    (*fn_)(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

// Thread `index`'s share of the current job: its own part, or the parts left, one at a time.
void ThreadPool::run_job(int index) {
  if (one_per_thread_) {
    if (index < parts_) run_part(index);
    return;
  }
  for (int part; (part = next_part_.fetch_add(1, std::memory_order_relaxed)) < parts_;) run_part(part);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      wake_.wait(lock, ready);
      --sleepers_;
    }
    if (stop_.load(std::memory_order_acquire)) return;
    {
      // The job's fields were written under mu_ before the bump; taking it orders our reads.
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_.load(std::memory_order_relaxed);
    }
    run_job(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be about to sleep on done_
      done_.notify_one();
    }
  }
}

void ThreadPool::start_and_wait(int64_t n, int parts, bool one_per_thread,
                                const std::function<void(int64_t, int64_t)>& fn) {
  std::lock_guard<std::mutex> job_lock(job_mu_);
  bool wake_sleepers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    parts_ = parts;
    one_per_thread_ = one_per_thread;
    next_part_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    pending_.store(int(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    wake_sleepers = sleepers_ > 0;
  }
  if (wake_sleepers) wake_.notify_all();
  run_job(0);
  auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(finished)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, finished);
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = error_;
    fn_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int parts = int(std::min<int64_t>(int64_t(size()) * kRangesPerThread, (n + grain - 1) / grain));
  if (parts <= 1 || size() == 1) {
    fn(0, n);
    return;
  }
  start_and_wait(n, parts, false, fn);
}

void ThreadPool::on_each_thread(const std::function<void(int)>& fn) {
  if (size() == 1) {
    fn(0);
    return;
  }
  const std::function<void(int64_t, int64_t)> one = [&](int64_t t, int64_t) { fn(int(t)); };
  start_and_wait(size(), size(), true, one);
}

}  // namespace m3
