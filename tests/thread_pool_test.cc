// Copyright 2026 The Strata Authors.
#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace strata
