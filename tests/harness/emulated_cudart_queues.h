// Copyright 2026 The Strata Authors.
//
// The emulated CUDA runtime's streams and events (emulated_cudart.cc): a
// stream is a thread that runs its operations in order, each after a delay;
// an event counts its records and the records whose work is done.
#ifndef STRATA_TESTS_HARNESS_EMULATED_CUDART_QUEUES_H_
#define STRATA_TESTS_HARNESS_EMULATED_CUDART_QUEUES_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "util/mutex.h"

namespace strata::emulated_cuda {

// A stream: a thread that runs its operations in order.
class Stream {
 public:
  Stream(int device, std::chrono::microseconds delay)
      : device_(device), delay_(delay), thread_([this] { Run(); }) {}
  ~Stream() {
    {
      MutexLock l(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    thread_.join();
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }

  // Enqueues `op`; returns its ticket (Synchronize(ticket) waits for it).
  uint64_t Enqueue(std::function<void()> op) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    queue_.push_back(std::move(op));
    cv_.SignalAll();
    return ++enqueued_;
  }
  // Whether every operation enqueued so far ran.
  bool Idle() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return done_ == enqueued_;
  }
  // Waits until every operation up to `ticket` ran (0: all enqueued now).
  void Synchronize(uint64_t ticket = 0) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (ticket == 0) ticket = enqueued_;
    while (done_ < ticket) cv_.Wait(&mu_);
  }

 private:
  void Run() EXCLUDES(mu_) {
    for (;;) {
      std::function<void()> op;
      {
        MutexLock l(&mu_);
        while (queue_.empty() && !stop_) cv_.Wait(&mu_);
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      op();
      MutexLock l(&mu_);
      ++done_;
      cv_.SignalAll();
    }
  }

  const int device_;
  const std::chrono::microseconds delay_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  uint64_t enqueued_ GUARDED_BY(mu_) = 0;
  uint64_t done_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is made
};

// An event: each record is a generation; a wait is for the generation
// recorded when the wait was asked for.
class Event {
 public:
  Event(int device, unsigned flags) : device_(device), flags_(flags) {}
  int device() const { return device_; }
  unsigned flags() const { return flags_; }

  uint64_t Record() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return ++recorded_;
  }
  uint64_t recorded() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return recorded_;
  }
  void Complete(uint64_t generation) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (generation > completed_) completed_ = generation;
    cv_.SignalAll();
  }
  void Wait(uint64_t generation) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    while (completed_ < generation) cv_.Wait(&mu_);
  }
  // Whether the newest record's work is done.
  bool Done() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return completed_ >= recorded_;
  }

 private:
  const int device_;
  const unsigned flags_;  // cudaEventCreateWithFlags's
  Mutex mu_;
  CondVar cv_;
  uint64_t recorded_ GUARDED_BY(mu_) = 0;
  uint64_t completed_ GUARDED_BY(mu_) = 0;
};

}  // namespace strata::emulated_cuda

#endif  // STRATA_TESTS_HARNESS_EMULATED_CUDART_QUEUES_H_
