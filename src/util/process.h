// Copyright 2026 The Strata Authors.
//
// What a process may use and does use: the descriptor limit and the
// counters Linux keeps in /proc/<pid>/status; who another process is, held
// by a pidfd so that a signal reaches that process and never the next one
// to get its pid.
#ifndef STRATA_UTIL_PROCESS_H_
#define STRATA_UTIL_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/status.h"
#include "util/unique_fd.h"

namespace strata {

// Raises the soft limit on open descriptors to the hard one (a server
// keeps a connection per node). Returns the soft limit now in force, or
// -1 if it is unknown or unlimited.
int64_t RaiseFileLimit();

// The number in the line `field:` of /proc/<pid>/status (0: this process),
// e.g. "VmHWM" (peak resident memory, KiB) or "Threads"; nullopt when the
// process or the field does not exist.
std::optional<int64_t> ProcessStatus(std::string_view field, pid_t pid = 0);

// The state letter of /proc/<pid>/stat ('R', 'S', 'Z', 'X', ...); nullopt
// when the process is gone or the file cannot be read. Never throws: the
// process may exit while its file is read (read(2) then fails with ESRCH).
std::optional<char> ProcessState(int64_t pid);
// The same, from an open /proc/<pid>/stat.
std::optional<char> ProcessStateFromStat(int fd);

// Who a process runs as: its user and group ids (real, effective, saved,
// file system) and supplementary groups, from /proc/<pid>/status.
struct ProcessCredentials {
  uid_t uids[4] = {0, 0, 0, 0};
  gid_t gids[4] = {0, 0, 0, 0};
  std::vector<gid_t> groups;

  // Whether every user id is `uid`.
  bool RunsAs(uid_t uid) const;
  // Whether `gid` is one of its group ids or supplementary groups.
  bool InGroup(gid_t gid) const;
};

// A process held by a pidfd (pidfd_open, Linux 5.3): the credentials read
// while holding it belong to it, and Signal reaches it or, once it has
// exited, nothing (never a process that got its pid since). Movable; closes
// the pidfd on destruction.
class PinnedProcess {
 public:
  // NOT_FOUND when no process has that pid; FAILED_PRECONDITION for pid 0,
  // negative pids (process groups) and this process itself.
  static StatusOr<PinnedProcess> Open(int64_t pid);

  int64_t pid() const { return pid_; }
  const ProcessCredentials& credentials() const { return credentials_; }
  // True while the process exists and has not exited (a zombie has).
  bool Alive() const;
  // Sends `sig` to this process; NOT_FOUND if it is gone.
  Status Signal(int sig) const;

 private:
  PinnedProcess(int64_t pid, UniqueFd fd) : pid_(pid), fd_(std::move(fd)) {}
  int64_t pid_ = 0;
  UniqueFd fd_;
  ProcessCredentials credentials_;
};

}  // namespace strata

#endif  // STRATA_UTIL_PROCESS_H_
