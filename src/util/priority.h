// Copyright 2026 The Strata Authors.
//
// Background work that must not slow the training step down.
#ifndef STRATA_UTIL_PRIORITY_H_
#define STRATA_UTIL_PRIORITY_H_

#include <sys/types.h>

namespace strata {

// Makes thread `tid` (0: the calling thread) run only when a CPU would
// otherwise idle: SCHED_IDLE, or nice 19 where that is refused. Threads it
// creates afterwards inherit this. Best effort: never fails.
void RunWhenIdle(pid_t tid = 0);

}  // namespace strata

#endif  // STRATA_UTIL_PRIORITY_H_
