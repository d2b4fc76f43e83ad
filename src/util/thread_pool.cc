// Copyright 2026 The Strata Authors.
#include "util/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <system_error>

#include "util/logging.h"

namespace strata {

// One ParallelFor in progress. Workers and the caller claim indices with an
// atomic counter; the caller waits until every claimed index has finished.
struct ThreadPool::Loop {
  size_t n = 0;
  const std::function<void(size_t)>* fn = nullptr;
  std::atomic<size_t> next{0};
  // Guarded by the pool's mu_ (which the analysis cannot name from here).
  size_t done = 0;
  int helpers = 0;  // workers currently inside this loop
  CondVar finished;

  // Runs indices until none are left; returns how many it ran.
  size_t Drain() {
    size_t ran = 0;
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n; ++ran) (*fn)(i);
    return ran;
  }
};

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    try {
      workers_.emplace_back([this] { WorkerMain(); });
    } catch (const std::system_error& e) {
      // Fewer workers: ParallelFor's caller runs what they would have.
      Log()->warn("thread pool: started {} of {} threads ({})", i, threads, e.what());
      break;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreads(int cap) {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(n, 1, std::max(cap, 1));
}

void ThreadPool::WorkerMain() {
  MutexLock l(&mu_);
  for (;;) {
    while (!stop_ && loops_.empty()) cv_.Wait(&mu_);
    if (stop_) return;
    Loop* loop = loops_.front();
    if (loop->next.load(std::memory_order_relaxed) >= loop->n) {
      loops_.pop_front();  // nothing left to claim
      continue;
    }
    ++loop->helpers;
    l.Unlock();
    size_t ran = loop->Drain();
    l.Lock();
    loop->done += ran;
    --loop->helpers;
    if (loop->done == loop->n && loop->helpers == 0) loop->finished.SignalAll();
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
    MutexLock l(&mu_);
    loops_.push_back(&loop);
  }
  cv_.SignalAll();
  size_t ran = loop.Drain();
  MutexLock l(&mu_);
  loop.done += ran;
  while (loop.done != loop.n || loop.helpers != 0) loop.finished.Wait(&mu_);
  auto it = std::find(loops_.begin(), loops_.end(), &loop);
  if (it != loops_.end()) loops_.erase(it);
}

namespace {

// The state a RunParallel's threads share.
class Run {
 public:
  Run(size_t n, const std::function<Status(size_t, const std::atomic<bool>&)>& fn,
      const std::function<void(const Status&)>& on_error)
      : n_(n), fn_(fn), on_error_(on_error) {}

  // Claims and runs indices until none are left or a task failed.
  void Work() {
    for (size_t i; !cancelled_.load() && (i = next_.fetch_add(1)) < n_;) {
      Status s = fn_(i, cancelled_);
      if (!s.ok()) Fail(std::move(s));
    }
  }
  void Fail(Status s) EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      if (!first_.ok()) return;
      first_ = s;
      cancelled_.store(true);
    }
    if (on_error_) on_error_(s);
  }
  Status first() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return first_;
  }

 private:
  const size_t n_;
  const std::function<Status(size_t, const std::atomic<bool>&)>& fn_;
  const std::function<void(const Status&)>& on_error_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> cancelled_{false};
  Mutex mu_;
  Status first_ GUARDED_BY(mu_);
};

}  // namespace

Status RunParallel(size_t n, size_t threads,
                   const std::function<Status(size_t, const std::atomic<bool>&)>& fn,
                   const std::function<void(const Status&)>& on_error) {
  Run run(n, fn, on_error);
  std::vector<std::thread> helpers;
  const size_t count = std::min(n, std::max<size_t>(threads, 1));
  for (size_t t = 1; t < count; ++t) {
    try {
      helpers.emplace_back([&run] { run.Work(); });
    } catch (const std::system_error& e) {
      run.Fail(ResourceExhaustedError(std::string("starting a thread: ") + e.what()));
      break;
    }
  }
  run.Work();
  for (auto& t : helpers) t.join();
  return run.first();
}

}  // namespace strata
