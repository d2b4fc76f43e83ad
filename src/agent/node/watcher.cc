// Copyright 2026 The Strata Authors.
#include "agent/node/watcher.h"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

namespace strata::agent {

namespace {

int InotifyInit() {
  const char* fail = std::getenv("STRATA_TEST_NO_INOTIFY");
  if (fail != nullptr && std::string_view(fail) == "1") {
    errno = EMFILE;
    return -1;
  }
  return ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
}

}  // namespace

StatusOr<DirWatcher> DirWatcher::Open(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "watching " + dir);
  UniqueFd fd(InotifyInit());
  if (!fd.valid()) {
    const int err = errno;  // before anything below may change it
    return DirWatcher(UniqueFd(), dir,
                      std::string("inotify_init1: ") + std::strerror(err) +
                          (err == EMFILE ? " (the limit fs.inotify.max_user_instances)" : ""));
  }
  if (::inotify_add_watch(fd.get(), dir.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0) {
    const int err = errno;
    if (err != ENOSPC && err != ENOMEM) return ErrnoToStatus(err, "watching " + dir);
    return DirWatcher(UniqueFd(), dir,
                      std::string("inotify_add_watch: ") + std::strerror(err) +
                          (err == ENOSPC ? " (the limit fs.inotify.max_user_watches)" : ""));
  }
  return DirWatcher(std::move(fd), dir, "");
}

StatusOr<std::vector<DirEvent>> DirWatcher::Wait(std::chrono::milliseconds timeout) {
  std::vector<DirEvent> events;
  if (polling()) {
    std::this_thread::sleep_for(timeout);
    return events;
  }
  struct pollfd p = {fd_.get(), POLLIN, 0};
  int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (rc < 0 && errno != EINTR) return ErrnoToStatus(errno, "waiting for events in " + dir_);
  if (rc <= 0) return events;
  alignas(struct inotify_event) char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      return ErrnoToStatus(errno, "reading events for " + dir_);
    }
    for (char* p2 = buf; p2 < buf + n;) {
      auto* e = reinterpret_cast<struct inotify_event*>(p2);
      DirEvent ev;
      ev.name = e->len > 0 ? std::string(e->name) : std::string();
      ev.closed_write = e->mask & IN_CLOSE_WRITE;
      ev.moved_in = e->mask & IN_MOVED_TO;
      ev.created = e->mask & IN_CREATE;
      ev.overflow = e->mask & IN_Q_OVERFLOW;
      events.push_back(std::move(ev));
      p2 += sizeof(struct inotify_event) + e->len;
    }
  }
  return events;
}

}  // namespace strata::agent
