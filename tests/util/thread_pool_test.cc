// Copyright 2026 The Strata Authors.
#include "util/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STRATA_UNDER_SANITIZER 1
#endif
#endif
#if !defined(STRATA_UNDER_SANITIZER) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
// A process that cannot start threads (its address space limited to what
// it maps now and 512 KiB, too little for a thread's stack): the pool works
// with the caller alone, and RunParallel says why it failed. In a fresh
// process (this test binary run again for this test alone), which the
// limit would otherwise outlive, and which has no stacks of threads joined
// by earlier tests that glibc could reuse without a new mapping. (Not
// under the sanitizers, whose shadow memory the limit does not allow for.)
constexpr char kNoThreadsChild[] = "STRATA_TEST_NO_THREADS_CHILD";

int RunWithoutThreads() {
  long pages = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%ld", &pages) != 1) pages = 0;
    fclose(f);
  }
  if (pages == 0) return 10;
  const rlim_t limit = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (512 << 10);
  const rlimit r{limit, limit};
  if (setrlimit(RLIMIT_AS, &r) != 0) return 11;
  ThreadPool pool(4);
  if (pool.parallelism() != 1) return 12;
  std::vector<int> hits(100);
  pool.ParallelFor(hits.size(), [&](size_t i) { ++hits[i]; });
  for (int h : hits) {
    if (h != 1) return 13;
  }
  Status s = RunParallel(10, 4, [](size_t, const std::atomic<bool>&) { return Status::Ok(); });
  if (s.code() != StatusCode::kResourceExhausted) return 14;
  if (s.message().find("starting a thread") == std::string::npos) return 15;
  return 0;
}

TEST(ThreadPoolTest, ThreadsThatCannotStartLeaveAWorkingPool) {
  if (getenv(kNoThreadsChild) != nullptr) _exit(RunWithoutThreads());  // the child
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv(kNoThreadsChild, "1", 1);
    const char* argv[] = {"unit_tests",
                          "--gtest_filter=ThreadPoolTest.ThreadsThatCannotStartLeaveAWorkingPool",
                          nullptr};
    execv("/proc/self/exe", const_cast<char* const*>(argv));
    _exit(16);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: statm, 11: setrlimit, 12: workers started, "
                                       "13: an index not run once, 14/15: RunParallel's error, "
                                       "16: exec";
}
#endif

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
