// Copyright 2026 The Strata Authors.
//
// Named crash points for crash-safety tests. When the environment variable
// STRATA_CRASH_AT is "<name>" or "<name>:<n>", the process kills itself with
// SIGKILL the first (or n-th) time execution reaches CrashPoint("<name>").
// Without the variable a crash point costs one predictable branch.
#ifndef STRATA_UTIL_CRASH_POINT_H_
#define STRATA_UTIL_CRASH_POINT_H_

namespace strata {

void CrashPoint(const char* name);

}  // namespace strata

#endif  // STRATA_UTIL_CRASH_POINT_H_
