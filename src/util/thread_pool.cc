// Copyright 2026 The Strata Authors.
#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace strata {

// One ParallelFor in progress. Workers and the caller claim indices with an
// atomic counter; the caller waits until every claimed index has finished.
struct ThreadPool::Loop {
  size_t n = 0;
  const std::function<void(size_t)>* fn = nullptr;
  std::atomic<size_t> next{0};
  size_t done = 0;  // GUARDED_BY(pool mu_)
  int helpers = 0;  // workers currently inside this loop; GUARDED_BY(pool mu_)
  std::condition_variable finished;

  // Runs indices until none are left; returns how many it ran.
  size_t Drain() {
    size_t ran = 0;
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n; ++ran) (*fn)(i);
    return ran;
  }
};

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerMain(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreads(int cap) {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, std::max(cap, 1));
}

void ThreadPool::WorkerMain() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || !loops_.empty(); });
    if (stop_) return;
    Loop* loop = loops_.front();
    if (loop->next.load(std::memory_order_relaxed) >= loop->n) {
      loops_.pop_front();  // nothing left to claim
      continue;
    }
    ++loop->helpers;
    l.unlock();
    size_t ran = loop->Drain();
    l.lock();
    loop->done += ran;
    --loop->helpers;
    if (loop->done == loop->n && loop->helpers == 0) loop->finished.notify_all();
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Loop loop;
  loop.n = n;
  loop.fn = &fn;
  {
    std::lock_guard<std::mutex> l(mu_);
    loops_.push_back(&loop);
  }
  cv_.notify_all();
  size_t ran = loop.Drain();
  std::unique_lock<std::mutex> l(mu_);
  loop.done += ran;
  loop.finished.wait(l, [&] { return loop.done == loop.n && loop.helpers == 0; });
  auto it = std::find(loops_.begin(), loops_.end(), &loop);
  if (it != loops_.end()) loops_.erase(it);
}

}  // namespace strata
