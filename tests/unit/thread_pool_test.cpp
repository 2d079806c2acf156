// The thread pool: every index is visited exactly once in contiguous ranges, across thousands of
// back-to-back jobs (the spinning hand-off), after the workers fell asleep (the blocking hand-off),
// from several calling threads at once, and with exceptions; a slowed thread's ranges go to the
// others; on_each_thread runs on every thread at once; the default size (usable CPUs).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "base/usable_cpus.h"

#if defined(__linux__)
#include <sched.h>
#endif

namespace {

// Runs one job over n indices; true when each index was visited exactly once.
bool covers_once(m3::ThreadPool& pool, int64_t n, int64_t grain = 1) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    EXPECT_LT(b, e);
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
  }, grain);
  for (auto& h : hits)
    if (h.load() != 1) return false;
  return true;
}

}  // namespace

TEST(ThreadPool, EveryIndexOnceOverManyBackToBackJobs) {
  for (int threads : {1, 2, 3, 5}) {
    m3::ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int job = 0; job < 3000; ++job) ASSERT_TRUE(covers_once(pool, 1 + job % 37)) << threads << " threads, job " << job;
    EXPECT_TRUE(covers_once(pool, 100000, 1000));
  }
}

TEST(ThreadPool, WakesWorkersThatFellAsleep) {
  m3::ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // far past the spin time
    std::atomic<int> parts{0};
    pool.parallel_for(3, [&](int64_t, int64_t) { parts.fetch_add(1); });
    EXPECT_EQ(parts.load(), 3);
  }
}

TEST(ThreadPool, RangesAreTheSameForEveryRun) {
  m3::ThreadPool pool(3);
  auto ranges = [&] {
    std::vector<int64_t> begin_of(10, -1);
    pool.parallel_for(10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) begin_of[size_t(i)] = b;
    });
    return begin_of;
  };
  const auto first = ranges();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ranges(), first);
}

// A worker held up in its first range (another tenant on its core, say) leaves every other index
// to the caller: with one range per thread the caller did four and the job waited for the other
// four.
TEST(ThreadPool, ASlowedThreadLeavesItsRangesToTheOthers) {
  m3::ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> done{0}, by_caller{0};
    std::atomic<bool> held{false};
    pool.parallel_for(8, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() == caller) {
        by_caller.fetch_add(int(e - b));
      } else if (!held.exchange(true)) {
        // Released when the other seven indices are done; the deadline only keeps a pool that
        // gave this thread more of them from hanging.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (done.load() < 8 - (e - b) && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      done.fetch_add(int(e - b));
    });
    EXPECT_EQ(done.load(), 8);
    EXPECT_GE(by_caller.load(), 7) << "round " << round;
  }
}

// on_each_thread: thread t runs fn(t) once, all of them at the same time (each waits for the rest).
TEST(ThreadPool, OnEachThreadRunsEveryThreadAtOnce) {
  for (int threads : {1, 2, 3}) {
    m3::ThreadPool pool(threads);
    std::vector<std::atomic<int>> calls(static_cast<size_t>(threads));
    std::atomic<int> arrived{0};
    std::vector<std::thread::id> ids(static_cast<size_t>(threads));
    pool.on_each_thread([&](int t) {
      calls[size_t(t)].fetch_add(1);
      ids[size_t(t)] = std::this_thread::get_id();
      arrived.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (arrived.load() < threads && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    });
    EXPECT_EQ(arrived.load(), threads);
    for (int t = 0; t < threads; ++t) EXPECT_EQ(calls[size_t(t)].load(), 1) << t;
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    for (int t = 1; t < threads; ++t)
      for (int u = 0; u < t; ++u) EXPECT_NE(ids[size_t(t)], ids[size_t(u)]);
  }
}

TEST(ThreadPool, ConcurrentCallersEachGetTheirWholeJob) {
  m3::ThreadPool pool(2);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int job = 0; job < 500; ++job)
        if (!covers_once(pool, 17)) failures.fetch_add(1);
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, ExceptionsReachTheCallerAndThePoolKeepsWorking) {
  m3::ThreadPool pool(3);
  for (int i = 0; i < 50; ++i) {
    EXPECT_THROW(pool.parallel_for(6, [&](int64_t b, int64_t) {
      if (b >= 4) throw std::runtime_error("last range");
    }), std::runtime_error);
    EXPECT_TRUE(covers_once(pool, 9));
  }
}

// The default thread count follows the CPUs the process may use, not the machine's: a pool of two
// threads on one CPU spins them against each other (usable_cpus.h).
TEST(UsableCpus, CgroupCpuMaxLines) {
  EXPECT_EQ(m3::cpus_of_cpu_max("200000 100000"), 2);
  EXPECT_EQ(m3::cpus_of_cpu_max("150000 100000\n"), 2);  // 1.5 CPUs: round up
  EXPECT_EQ(m3::cpus_of_cpu_max("50000 100000"), 1);
  EXPECT_EQ(m3::cpus_of_cpu_max("max 100000"), std::nullopt);
  EXPECT_EQ(m3::cpus_of_cpu_max(""), std::nullopt);
  EXPECT_EQ(m3::cpus_of_cpu_max("12x 100000"), std::nullopt);
  EXPECT_EQ(m3::cpus_of_cpu_max("100000 0"), std::nullopt);
  EXPECT_EQ(m3::cpus_of_cpu_max("-5 100000"), std::nullopt);
}

#if defined(__linux__)
TEST(UsableCpus, FollowTheAffinityMaskAndSizeTheDefaultPool) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const int all = m3::usable_cpus();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, CPU_COUNT(&saved));
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(m3::usable_cpus(), 1);
  m3::ThreadPool pool(0);
  EXPECT_EQ(pool.size(), 1);
  EXPECT_TRUE(covers_once(pool, 10));
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(m3::usable_cpus(), all);
}
#endif
