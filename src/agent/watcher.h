// Copyright 2026 The Strata Authors.
//
// DirWatcher: inotify on one directory (not recursive), reporting the events
// the replicator protocol reacts to — a file closed after writing, an entry
// renamed into the directory, a directory created in it. Used by one thread.
#ifndef STRATA_AGENT_WATCHER_H_
#define STRATA_AGENT_WATCHER_H_

#include <chrono>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata::agent {

struct DirEvent {
  std::string name;
  bool closed_write = false;  // IN_CLOSE_WRITE
  bool moved_in = false;      // IN_MOVED_TO
  bool created = false;       // IN_CREATE
  bool overflow = false;      // events were lost: rescan the directory
};

class DirWatcher {
 public:
  static StatusOr<DirWatcher> Open(const std::string& dir);
  DirWatcher(DirWatcher&& o) noexcept : fd_(o.fd_), dir_(std::move(o.dir_)) { o.fd_ = -1; }
  DirWatcher& operator=(DirWatcher&&) = delete;
  ~DirWatcher();
  // Waits up to `timeout` for events; empty on timeout.
  StatusOr<std::vector<DirEvent>> Wait(std::chrono::milliseconds timeout);

 private:
  DirWatcher(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  int fd_;
  std::string dir_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_WATCHER_H_
