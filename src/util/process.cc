// Copyright 2026 The Strata Authors.
#include "util/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace strata {

int64_t RaiseFileLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = {rl.rlim_max, rl.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int64_t>(rl.rlim_cur);
}

std::optional<int64_t> ProcessStatus(std::string_view field, pid_t pid) {
  std::ifstream in("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      try {
        return std::stoll(line.substr(field.size() + 1));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

std::optional<char> ProcessStateFromStat(int fd) {
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the name may contain spaces and ')'
  if (paren == nullptr || paren[1] != ' ' || paren[2] == '\0') return std::nullopt;
  return paren[2];
}

std::optional<char> ProcessState(int64_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  const UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  return ProcessStateFromStat(fd.get());
}

bool ProcessCredentials::RunsAs(uid_t uid) const {
  return std::all_of(std::begin(uids), std::end(uids), [uid](uid_t u) { return u == uid; });
}

bool ProcessCredentials::InGroup(gid_t gid) const {
  return std::find(std::begin(gids), std::end(gids), gid) != std::end(gids) ||
         std::find(groups.begin(), groups.end(), gid) != groups.end();
}

namespace {

// The "Uid:", "Gid:" and "Groups:" lines of /proc/<pid>/status.
StatusOr<ProcessCredentials> ReadCredentials(int64_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  std::ifstream in(path);
  if (!in) return NotFoundError("no process " + std::to_string(pid) + " (" + path + ")");
  ProcessCredentials c;
  bool uids = false, gids = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line.substr(line.find(':') + 1));
    if (line.starts_with("Uid:")) {
      uids = static_cast<bool>(fields >> c.uids[0] >> c.uids[1] >> c.uids[2] >> c.uids[3]);
    } else if (line.starts_with("Gid:")) {
      gids = static_cast<bool>(fields >> c.gids[0] >> c.gids[1] >> c.gids[2] >> c.gids[3]);
    } else if (line.starts_with("Groups:")) {
      for (gid_t g; fields >> g;) c.groups.push_back(g);
    }
  }
  if (!uids || !gids) return DataLossError(path + " does not say who the process runs as");
  return c;
}

int PidfdOpen(int64_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
}

int PidfdSendSignal(int fd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0));
}

// Whether /proc/<pid>/stat says the process has exited (Z or X).
bool Exited(int64_t pid) {
  const std::optional<char> state = ProcessState(pid);
  return state == 'Z' || state == 'X';
}

}  // namespace

StatusOr<PinnedProcess> PinnedProcess::Open(int64_t pid) {
  if (pid <= 0 || pid == ::getpid()) {
    return FailedPreconditionError("pid " + std::to_string(pid) + " is not another process");
  }
  UniqueFd fd(PidfdOpen(pid));
  if (!fd.valid()) {
    if (errno == ESRCH) return NotFoundError("no process " + std::to_string(pid));
    return ErrnoToStatus(errno, "pidfd_open " + std::to_string(pid));
  }
  PinnedProcess p(pid, std::move(fd));
  STRATA_ASSIGN_OR_RETURN(p.credentials_, ReadCredentials(pid));
  // The pid may have changed hands between pidfd_open and the read: what
  // was read is the pinned process's only if it still lives now.
  if (!p.Alive()) return NotFoundError("process " + std::to_string(pid) + " exited");
  return p;
}

bool PinnedProcess::Alive() const {
  // Signal 0 through the pidfd: ESRCH once the process has been reaped.
  // While it succeeds the pid is still the pinned process's, so /proc
  // speaks of it.
  // EPERM: it lives, as a user this process may not signal.
  return fd_.valid() && (PidfdSendSignal(fd_.get(), 0) == 0 || errno == EPERM) && !Exited(pid_);
}

Status PinnedProcess::Signal(int sig) const {
  if (PidfdSendSignal(fd_.get(), sig) == 0) return Status::Ok();
  if (errno == ESRCH) return NotFoundError("process " + std::to_string(pid_) + " exited");
  return ErrnoToStatus(errno,
                       "signal " + std::to_string(sig) + " to process " + std::to_string(pid_));
}

}  // namespace strata
