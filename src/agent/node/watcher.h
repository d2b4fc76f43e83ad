// Copyright 2026 The Strata Authors.
//
// DirWatcher: inotify on one directory (not recursive), reporting the events
// the replicator protocol reacts to — a file closed after writing, an entry
// renamed into the directory, a directory created in it. Used by one thread.
//
// Where inotify cannot be had (the host-wide limits fs.inotify.max_user_
// instances and max_user_watches are easy to exhaust on a shared machine),
// Open() returns a watcher that reports no events (polling() is true and
// reason() says why): its user rescans the directory on a timer instead.
// STRATA_TEST_NO_INOTIFY=1 in the environment makes inotify_init1 fail with
// EMFILE, for tests of that path.
#ifndef STRATA_AGENT_NODE_WATCHER_H_
#define STRATA_AGENT_NODE_WATCHER_H_

#include <chrono>
#include <string>
#include <vector>

#include "strata/status.h"
#include "util/unique_fd.h"

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
  DirWatcher(DirWatcher&& o) noexcept = default;
  DirWatcher& operator=(DirWatcher&&) = delete;
  // Waits up to `timeout` for events; empty on timeout (always, polling).
  StatusOr<std::vector<DirEvent>> Wait(std::chrono::milliseconds timeout);
  // No inotify: events are never reported.
  bool polling() const { return !fd_.valid(); }
  // Why it is polling ("inotify_init1: Too many open files ..."), or "".
  const std::string& reason() const { return reason_; }

 private:
  DirWatcher(UniqueFd fd, std::string dir, std::string reason)
      : fd_(std::move(fd)), dir_(std::move(dir)), reason_(std::move(reason)) {}
  UniqueFd fd_;  // none: polling
  std::string dir_;
  std::string reason_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_WATCHER_H_
