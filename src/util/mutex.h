// Copyright 2026 The Strata Authors.
//
// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// the lock contracts of util/thread_annotations.h, so that clang checks
// every GUARDED_BY member and REQUIRES function against them.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_);
//   void Bump() EXCLUDES(mu_) { MutexLock l(&mu_); ++count_; }
//
// A condition is waited for in a loop the analysis can see (a predicate
// lambda would be analyzed as a function of its own, without the lock):
//
//   MutexLock l(&mu_);
//   while (!ready_) cv_.Wait(&mu_);
#ifndef STRATA_UTIL_MUTEX_H_
#define STRATA_UTIL_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "util/thread_annotations.h"

namespace strata {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the mutex is held where it cannot follow (a callback
  // the caller documents as run under the lock). Not checked at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope. Unlock() and Lock() let a scope give the
// mutex up for a while (e.g. around I/O); the destructor releases it only
// if held.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    held_ = false;
    mu_->Unlock();
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable. Each wait names the Mutex it releases while it
// waits, which the caller holds (checked, as absl's CondVar::Wait(mu)).
// Waits may wake spuriously: wait in a loop on the condition.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();
  }
  // False once `deadline` has passed.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    const bool in_time = cv_.wait_until(l, deadline) == std::cv_status::no_timeout;
    l.release();
    return in_time;
  }
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace strata

#endif  // STRATA_UTIL_MUTEX_H_
