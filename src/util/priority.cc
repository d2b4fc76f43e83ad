// Copyright 2026 The Strata Authors.
#include "util/priority.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace strata {

void RunWhenIdle(pid_t tid) {
  if (tid == 0) tid = static_cast<pid_t>(::syscall(SYS_gettid));
  sched_param param{};
  param.sched_priority = 0;
  if (::sched_setscheduler(tid, SCHED_IDLE, &param) != 0) {
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
  }
}

}  // namespace strata
