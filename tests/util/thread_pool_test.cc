// Copyright 2026 The Strata Authors.
#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "util/mutex.h"

namespace strata {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  for (int workers : {0, 1, 3}) {
    ThreadPool pool(workers);
    std::vector<std::atomic<int>> hits(1000);
    pool.ParallelFor(hits.size(), [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ThreadPoolTest, ConcurrentLoopsFromSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        pool.ParallelFor(100, [&](size_t i) { sum.fetch_add(static_cast<long>(i)); });
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(sum.load(), 4L * 50 * 4950);
}

TEST(ThreadPoolTest, EmptyLoopReturns) {
  ThreadPool pool(2);
  pool.ParallelFor(0, [](size_t) { FAIL(); });
}

TEST(RunParallelTest, RunsEveryIndexOnceOnAtMostThatManyThreads) {
  for (size_t threads : {size_t{0}, size_t{1}, size_t{4}, size_t{64}}) {
    std::vector<std::atomic<int>> hits(200);
    std::atomic<int> running{0}, most{0};
    Status s = RunParallel(hits.size(), threads, [&](size_t i, const std::atomic<bool>&) {
      const int now = running.fetch_add(1) + 1;
      for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
      }
      hits[i].fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      running.fetch_sub(1);
      return Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
    EXPECT_LE(most.load(), static_cast<int>(std::max<size_t>(threads, 1)));
  }
}

// The first error is the answer; after it no index starts, tasks in flight
// see `cancelled`, what they return then is not reported, and on_error runs
// once with the first error.
TEST(RunParallelTest, TheFirstErrorWinsAndCancelsTheRest) {
  std::atomic<int> started{0}, on_error_calls{0};
  std::atomic<bool> saw_cancel{false};
  Status reported;
  Status s = RunParallel(
      1000, 4,
      [&](size_t i, const std::atomic<bool>& cancelled) {
        started.fetch_add(1);
        if (i == 3) return DataLossError("file 3 is corrupt");
        // Tasks in flight wait for the cancel, then give up.
        for (int k = 0; k < 2000 && !cancelled.load(); ++k) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (cancelled.load()) {
          saw_cancel = true;
          return CancelledError("gave up");
        }
        return Status::Ok();
      },
      [&](const Status& first) {
        on_error_calls.fetch_add(1);
        reported = first;
      });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "file 3 is corrupt");
  EXPECT_EQ(on_error_calls.load(), 1);
  EXPECT_EQ(reported.message(), "file 3 is corrupt");
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_LT(started.load(), 1000);
}

TEST(RunParallelTest, NothingToRun) {
  EXPECT_TRUE(RunParallel(0, 4, [](size_t, const std::atomic<bool>&) {
                return InternalError("must not run");
              }).ok());
}

// CondVar waits release the Mutex and take it back; a timed wait reports
// its timeout.
TEST(MutexTest, CondVarHandsOverAndTimesOut) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    MutexLock l(&mu);
    ready = true;
    cv.SignalAll();
  });
  {
    MutexLock l(&mu);
    while (!ready) cv.Wait(&mu);
    // Nobody signals again: the wait ends at its deadline (after any
    // spurious wakeups), holding the mutex.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
    while (cv.WaitUntil(&mu, deadline)) {
    }
    EXPECT_GE(std::chrono::steady_clock::now(), deadline);
    l.Unlock();
    l.Lock();
  }
  setter.join();
  EXPECT_TRUE(ready);
}

}  // namespace
}  // namespace strata
