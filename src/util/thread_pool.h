// Copyright 2026 The Strata Authors.
//
// A fixed pool of worker threads for data-parallel loops over chunks.
// Thread-safe. ParallelFor must not be called from inside a pool task.
#ifndef STRATA_UTIL_THREAD_POOL_H_
#define STRATA_UTIL_THREAD_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // `threads` workers in addition to the callers of ParallelFor; 0 is
  // allowed (ParallelFor then runs everything on the calling thread).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs fn(0) ... fn(n-1) on the workers and the calling thread; returns
  // when all have finished. Indices are handed out in increasing order.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

  // Total threads a ParallelFor can use (workers + caller).
  int parallelism() const { return static_cast<int>(workers_.size()) + 1; }

  // One thread per CPU, capped at `cap`, at least 1.
  static int DefaultThreads(int cap = 8);

 private:
  struct Loop;
  void WorkerMain();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Loop*> loops_;  // GUARDED_BY(mu_)
  bool stop_ = false;        // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;
};

}  // namespace strata

#endif  // STRATA_UTIL_THREAD_POOL_H_
