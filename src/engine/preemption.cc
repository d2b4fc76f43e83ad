// Copyright 2026 The Strata Authors.
#include "engine/preemption.h"

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

namespace strata {
namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);

std::atomic<uint64_t> g_notices{0};
std::atomic<int64_t> g_last_notice_ns{0};
std::atomic<std::atomic<uint64_t>*> g_mirror{nullptr};
std::atomic<uint64_t> g_mirror_base{0};

// Dispositions replaced by ours, indexed by signal number. Written under
// g_install_mu before our handler is installed for that signal, read only by
// the handler afterwards.
struct sigaction g_previous[NSIG];
bool g_installed[NSIG];  // GUARDED_BY(g_install_mu)
std::mutex g_install_mu;

void Handler(int sig, siginfo_t* info, void* context) {
  int saved_errno = errno;
  NotePreemption();
  const struct sigaction& prev = g_previous[sig];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  errno = saved_errno;
}

}  // namespace

void NotePreemption() noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (POSIX)
  g_last_notice_ns.store(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec,
                         std::memory_order_relaxed);
  uint64_t count = g_notices.fetch_add(1, std::memory_order_release) + 1;
  if (std::atomic<uint64_t>* mirror = g_mirror.load()) mirror->store(count - g_mirror_base.load());
}

void MirrorNoticesTo(std::atomic<uint64_t>* word) noexcept {
  g_mirror.store(nullptr);
  if (word != nullptr) {
    g_mirror_base.store(g_notices.load());
    word->store(0);
  }
  g_mirror.store(word);
}

uint64_t PreemptionNotices() noexcept { return g_notices.load(std::memory_order_relaxed); }

int64_t LastNoticeMonotonicNs() noexcept {
  return g_last_notice_ns.load(std::memory_order_relaxed);
}

Status InstallPreemptionHandlers(const std::vector<int>& signals) {
  std::lock_guard<std::mutex> l(g_install_mu);
  for (int sig : signals) {
    if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP) {
      return InvalidArgumentError("cannot handle signal " + std::to_string(sig));
    }
    if (g_installed[sig]) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = Handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, nullptr, &g_previous[sig]) != 0 || sigaction(sig, &sa, nullptr) != 0) {
      return ErrnoToStatus(errno, "installing the handler for signal " + std::to_string(sig));
    }
    g_installed[sig] = true;
  }
  return Status::Ok();
}

}  // namespace strata
