// Copyright 2026 The Strata Authors.
//
// A fixed pool of worker threads for data-parallel loops over chunks.
// Thread-safe. ParallelFor must not be called from inside a pool task.
//
// Beside it, RunParallel: the one loop over tasks that block (network
// transfers, object-store requests) and that stops at the first error.
#ifndef STRATA_UTIL_THREAD_POOL_H_
#define STRATA_UTIL_THREAD_POOL_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "strata/status.h"
#include "util/mutex.h"

namespace strata {

class ThreadPool {
 public:
  // `threads` workers in addition to the callers of ParallelFor; 0 is
  // allowed (ParallelFor then runs everything on the calling thread). When
  // a thread cannot be started (the process's thread or memory limit), the
  // pool keeps those that started, says so in the log, and stays correct
  // with fewer (parallelism() tells how many).
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

  Mutex mu_;
  CondVar cv_;
  std::deque<Loop*> loops_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// Runs fn(i, cancelled) for every i in [0, n) on up to `threads` threads:
// the caller's and threads started for this call (blocking tasks must not
// occupy a ThreadPool's CPU workers). The first error wins: once a task
// fails no new index starts, `cancelled` becomes true (tasks in flight may
// check it to give up early; what they then return is not reported), and
// `on_error`, if given, runs once with that error (e.g. to shut down the
// sockets the other tasks block on). A thread that cannot be started fails
// the run with RESOURCE_EXHAUSTED. Returns the first error, else OK.
Status RunParallel(size_t n, size_t threads,
                   const std::function<Status(size_t i, const std::atomic<bool>& cancelled)>& fn,
                   const std::function<void(const Status&)>& on_error = nullptr);

}  // namespace strata

#endif  // STRATA_UTIL_THREAD_POOL_H_
