#pragma once
// The one thread pool of the process. Work is split into contiguous ranges so results do not
// depend on scheduling: for a fixed thread count the ranges are always the same and each is
// computed by the same code in the same order, which keeps outputs bit-identical between runs.
//
// There are a few more ranges than threads, and each thread takes the next one left when it is
// done with its last: a thread slowed down (another tenant on its core, an efficiency core beside
// performance cores, an interrupt) then leaves its share to the others, where with one range per
// thread every job waited for the slowest (docs/BENCHMARKS.md §0z).
//
// A decode step is hundreds of parallel_for calls of a few microseconds each, so handing work to a
// sleeping thread (a futex wake: tens of microseconds on a VM) would cost more than the work. Idle
// workers therefore poll the job counter for a short while before they block, and the caller
// polls while it waits for the last range; both yield their CPU between polls and fall back to
// sleeping on a condition variable.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace m3 {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // <= 0: usable_cpus() (base/usable_cpus.h)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }  // workers + the calling thread

  // Calls fn(begin, end) on disjoint ranges covering [0, n); blocks until all are done.
  // Ranges are about `grain` long or longer, at most kRangesPerThread per thread. Exceptions
  // thrown by fn are rethrown here (first one wins).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  // Calls fn(t) once on every thread t of the pool (0 = the caller) at the same time: for
  // measurements that need every thread busy at once (base/machine_bounds.h).
  void on_each_thread(const std::function<void(int)>& fn);

  // Ranges per thread of a large parallel_for: enough that a thread running at half speed costs
  // a job about an eighth of its time instead of half, few enough that a range's fixed work
  // (packing, prefetch ramp-up) stays small.
  static constexpr int kRangesPerThread = 4;

 private:
  void worker_loop(int index);
  void run_part(int part);
  void run_job(int index);
  void start_and_wait(int64_t n, int parts, bool one_per_thread, const std::function<void(int64_t, int64_t)>& fn);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};  // bumped (under mu_) for every job
  std::atomic<int> pending_{0};          // workers that have not finished the current job
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;                     // workers blocked on wake_ (under mu_)
  // The job being run: written under mu_ before generation_ is bumped.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 0;
  bool one_per_thread_ = false;   // part t runs on thread t (on_each_thread)
  std::atomic<int> next_part_{0};  // the next part not yet taken
  std::exception_ptr error_;
  std::mutex job_mu_;  // one parallel_for at a time
};

}  // namespace m3
