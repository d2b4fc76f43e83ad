// Copyright 2026 The Strata Authors.
//
// Not part of any build: `make check-locks` compiles it with
// -Wthread-safety and requires exactly the five warnings marked "expect",
// which proves the analysis is on and sees through Mutex, MutexLock and
// CondVar (a checker that found nothing would pass everything).
#include "util/mutex.h"

namespace strata {

class Account {
 public:
  void DepositUnlocked(int n) { balance_ += n; }  // expect: writing balance_ requires mu_

  void Wait() {
    MutexLock l(&mu_);
    l.Unlock();
    while (balance_ == 0) cv_.Wait(&mu_);  // expect: reading balance_ and Wait require mu_
  }

  void Helper() REQUIRES(mu_) {}
  void CallsHelperUnlocked() { Helper(); }  // expect: calling Helper requires mu_

  void Reenters() EXCLUDES(mu_) {}
  void CallsReentersLocked() {
    MutexLock l(&mu_);
    Reenters();  // expect: cannot call Reenters while holding mu_
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int balance_ GUARDED_BY(mu_) = 0;
};

}  // namespace strata
