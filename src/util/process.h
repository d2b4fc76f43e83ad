// Copyright 2026 The Strata Authors.
//
// What a process may use and does use: the descriptor limit and the
// counters Linux keeps in /proc/<pid>/status.
#ifndef STRATA_UTIL_PROCESS_H_
#define STRATA_UTIL_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

// Raises the soft limit on open descriptors to the hard one (a server
// keeps a connection per node). Returns the soft limit now in force, or
// -1 if it is unknown or unlimited.
int64_t RaiseFileLimit();

// The number in the line `field:` of /proc/<pid>/status (0: this process),
// e.g. "VmHWM" (peak resident memory, KiB) or "Threads"; nullopt when the
// process or the field does not exist.
std::optional<int64_t> ProcessStatus(std::string_view field, pid_t pid = 0);

}  // namespace strata

#endif  // STRATA_UTIL_PROCESS_H_
