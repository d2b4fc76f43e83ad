// Copyright 2026 The Strata Authors.
#include "supervisor/supervisor.h"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "format/naming.h"
#include "strata/catalog.h"
#include "util/file_util.h"
#include "util/unique_fd.h"

extern char** environ;

namespace strata::supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long stragglers may stay after SIGKILL before the supervisor moves on
// (a process stuck in uninterruptible sleep cannot be waited for forever).
constexpr milliseconds kAfterKill{5000};

void Log(std::ostream& log, const std::string& line) {
  log << "strata run: " << line << "\n";
  log.flush();
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`") == std::string::npos;
    s += plain ? a : "'" + a + "'";
  }
  return s;
}

std::string StepString(std::optional<int64_t> step) {
  return step ? std::to_string(*step) : "none";
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The exit code a shell would report for a wait status.
int ExitCode(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

std::string DescribeStatus(int status) {
  if (WIFSIGNALED(status)) return "signal=" + SignalName(WTERMSIG(status));
  return "code=" + std::to_string(WEXITSTATUS(status));
}

sigset_t WatchedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGCHLD);
  return set;
}

// Waits up to `timeout` for one of the watched (blocked) signals; 0 if none.
int WaitSignal(milliseconds timeout) {
  const sigset_t set = WatchedSignals();
  timespec ts{static_cast<time_t>(timeout.count() / 1000),
              static_cast<long>(timeout.count() % 1000) * 1000000};
  int sig = ::sigtimedwait(&set, nullptr, &ts);
  return sig < 0 ? 0 : sig;  // EAGAIN on timeout, EINTR: just poll again
}

// The newest committed step in `dir`, or nullopt (none, or unreadable).
std::optional<int64_t> NewestStep(const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  auto steps = ListSteps(dir);
  if (!steps.ok() || steps->empty()) return std::nullopt;
  return steps->back();
}

// The environment the command starts with: this process's, less the job's
// secret (STRATA_SECRET, STRATA_SECRET_FILE). The trainer never needs it
// (it talks to its agent through files and the agent's local socket), and
// whatever runs in the trainer's processes can read their environment.
std::vector<char*> TrainerEnvironment() {
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.starts_with("STRATA_SECRET=") || entry.starts_with("STRATA_SECRET_FILE=")) continue;
    env.push_back(*e);
  }
  env.push_back(nullptr);
  return env;
}

// Starts `argv` in a new process group with default signal dispositions and
// an empty signal mask. Returns the pid or an errno.
StatusOr<pid_t> Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults = WatchedSignals();
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  std::vector<char*> env = TrainerEnvironment();
  int err = ::posix_spawnp(&pid, args[0], nullptr, &attr, args.data(), env.data());
  posix_spawnattr_destroy(&attr);
  if (err != 0) return ErrnoToStatus(err, "cannot start " + argv[0]);
  return pid;
}

// How one run of the command ended.
struct RunEnd {
  int status = 0;          // wait status of the command (the group leader)
  int forwarded = 0;       // the signal forwarded to the group, or 0
  Clock::duration length;  // from start until the whole group was gone
};

// Waits for the leader `pid` and every other process of its group, forwarding
// SIGTERM/SIGINT and escalating to SIGKILL after the grace period.
class GroupWaiter {
 public:
  GroupWaiter(pid_t pid, milliseconds grace, std::ostream& log)
      : pid_(pid), grace_(grace), log_(log) {}

  RunEnd Wait() {
    const auto start = Clock::now();
    while (!Done()) {
      int sig = WaitSignal(milliseconds(100));
      if (sig == SIGTERM || sig == SIGINT) Forward(sig);
    }
    return {status_.value_or(0), forwarded_, Clock::now() - start};
  }

 private:
  // Reaps, escalates; true when the leader is reaped and the group is gone
  // (or has outlived SIGKILL by kAfterKill).
  bool Done() {
    Reap();
    const auto now = Clock::now();
    const bool group_alive = ::kill(-pid_, 0) == 0 || errno == EPERM;  // EPERM: a member exists
    if (status_ && !group_alive) return true;
    if (status_ && !deadline_) {
      Log(log_, fmt::format("process group {} outlived its leader: SIGTERM, SIGKILL in {:.3g}s",
                            pid_, Seconds(grace_)));
      ::kill(-pid_, SIGTERM);
      deadline_ = now + grace_;
    }
    if (deadline_ && now >= *deadline_ && !killed_at_) {
      Log(log_, fmt::format("grace period of {:.3g}s over: SIGKILL to process group {}",
                            Seconds(grace_), pid_));
      ::kill(-pid_, SIGKILL);
      killed_at_ = now;
    }
    if (status_ && killed_at_ && now - *killed_at_ > kAfterKill) {
      Log(log_, fmt::format("process group {} still present after SIGKILL; moving on", pid_));
      return true;
    }
    return false;
  }

  // Reaps the leader and any orphans of the group reparented to us.
  void Reap() {
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(-1, &status, WNOHANG);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return;
      if (r == pid_) status_ = status;
    }
  }

  void Forward(int sig) {
    Log(log_, fmt::format("{}: forwarding to process group {}; no restart; SIGKILL in {:.3g}s",
                          SignalName(sig), pid_, Seconds(grace_)));
    ::kill(-pid_, sig);
    forwarded_ = sig;
    if (!deadline_) deadline_ = Clock::now() + grace_;
  }

  const pid_t pid_;
  const milliseconds grace_;
  std::ostream& log_;
  std::optional<int> status_;  // set once the leader is reaped
  int forwarded_ = 0;
  std::optional<Clock::time_point> deadline_;   // SIGKILL at this time
  std::optional<Clock::time_point> killed_at_;  // SIGKILL sent
};

// Sleeps `d`; returns the SIGTERM/SIGINT that cut it short, or 0. A
// signal already pending counts even when `d` is 0.
int Sleep(milliseconds d) {
  const auto until = Clock::now() + d;
  auto now = Clock::now();
  do {
    auto left = std::chrono::duration_cast<milliseconds>(until - now) + milliseconds(1);
    int sig = WaitSignal(left);
    if (sig == SIGTERM || sig == SIGINT) return sig;
    now = Clock::now();
  } while (now < until);
  return 0;
}

class Supervisor {
 public:
  Supervisor(const SupervisorOptions& o, std::ostream& log) : o_(o), log_(log) {
    rng_.seed(o.seed != 0 ? o.seed : std::random_device{}());
  }

  int Run();

 private:
  int GiveUp(const std::string& why) {
    Log(log_, "giving up: " + why);
    return kExitGaveUp;
  }
  Status LockDir();
  // After a failed run: crash-loop bookkeeping. Returns an exit code to stop.
  std::optional<int> AfterFailure(bool progress, std::optional<int64_t> newest);
  std::optional<int> Quarantine(std::optional<int64_t> newest);
  std::optional<int64_t> Newest() const;

  const SupervisorOptions& o_;
  std::ostream& log_;
  std::mt19937_64 rng_;
  UniqueFd run_lock_;    // flock(LOCK_EX) on the run lock file
  int no_progress_ = 0;  // failed runs in a row without progress
  // Quarantines since training last got past the newest quarantined step
  // (NoteProgressPast): each crash loop of a long job has the whole budget.
  int quarantines_ = 0;
  std::optional<int64_t> newest_quarantined_;

  // A run saved `after`: past every quarantined step, the crash loops that
  // quarantined them are over.
  void NoteProgressPast(std::optional<int64_t> after);
};

Status Supervisor::LockDir() {
  std::error_code ec;
  std::filesystem::create_directories(o_.checkpoint_dir, ec);
  if (ec) return ErrnoToStatus(ec.value(), "create " + o_.checkpoint_dir);
  STRATA_ASSIGN_OR_RETURN(
      run_lock_, LockFileExclusive(JoinPath(o_.checkpoint_dir, kRunLockFileName),
                                   o_.checkpoint_dir + " is supervised by another strata run",
                                   /*write_pid=*/true));
  return Status::Ok();
}

std::optional<int64_t> Supervisor::Newest() const {
  return o_.agent ? o_.agent->newest() : NewestStep(o_.checkpoint_dir);
}

// Quarantines the step the runs keep failing on: the newest in the
// checkpoint directory (renamed out of the catalog's sight), or, through the
// agent, the step it restored (the job never restores it again, from any
// tier, so the next restore takes an older step).
std::optional<int> Supervisor::Quarantine(std::optional<int64_t> newest) {
  const auto step = o_.agent ? o_.agent->restored() : newest;
  if (quarantines_ >= o_.max_quarantines) {
    return GiveUp(fmt::format("crash loop at step {} and {} quarantine(s) done (--max-quarantines)",
                              StepString(step), quarantines_));
  }
  if (!step) {
    return GiveUp(o_.agent ? "crash loop and the agent restored no checkpoint to quarantine"
                           : "crash loop and no checkpoint left to quarantine");
  }
  // What was done, and what the next run does (the log line's two ends).
  std::string what, next;
  if (o_.agent) {
    auto done = o_.agent->quarantine(*step);
    if (!done.ok()) return GiveUp("cannot quarantine step: " + done.status().ToString());
    what = *done;
  } else {
    auto name = QuarantineStep(o_.checkpoint_dir, *step);
    if (!name.ok()) return GiveUp("cannot quarantine step: " + name.status().ToString());
    what = fmt::format("renamed {} to {}", JoinPath(o_.checkpoint_dir, StepDirName(*step)), *name);
    next = "; the next run restores step " + StepString(NewestStep(o_.checkpoint_dir));
  }
  ++quarantines_;
  newest_quarantined_ = std::max(newest_quarantined_.value_or(*step), *step);
  no_progress_ = 0;
  Log(log_, fmt::format("QUARANTINED step {}: {} ({} of at most {}){}", *step, what, quarantines_,
                        o_.max_quarantines, next));
  return std::nullopt;
}

void Supervisor::NoteProgressPast(std::optional<int64_t> after) {
  if (quarantines_ == 0 || !after || !newest_quarantined_ || *after <= *newest_quarantined_) return;
  Log(log_, fmt::format("step {} is past the quarantined step {}: that crash loop is over, "
                        "--max-quarantines counts afresh",
                        *after, *newest_quarantined_));
  quarantines_ = 0;
}

std::optional<int> Supervisor::AfterFailure(bool progress, std::optional<int64_t> newest) {
  if (o_.checkpoint_dir.empty() && !o_.agent) return std::nullopt;
  no_progress_ = progress ? 0 : no_progress_ + 1;
  if (no_progress_ < o_.crash_loop_runs) return std::nullopt;
  Log(log_, fmt::format("crash loop: {} failed runs in a row made no progress past step {}",
                        no_progress_, StepString(newest)));
  return Quarantine(newest);
}

int Supervisor::Run() {
  if (o_.command.empty()) return GiveUp("no command to run");
  if (!o_.checkpoint_dir.empty()) {
    Status s = LockDir();
    if (!s.ok()) return GiveUp(s.ToString());
  }
  int restarts = 0, backoff_n = 0;
  for (int attempt = 1;; ++attempt) {
    const auto before = Newest();
    const auto start_before = o_.agent && o_.agent->start ? o_.agent->start() : std::nullopt;
    auto pid = Spawn(o_.command);
    if (!pid.ok()) {
      Log(log_, pid.status().ToString());
      return kExitCannotStart;
    }
    const bool track = !o_.checkpoint_dir.empty() || o_.agent.has_value();
    Log(log_, fmt::format("start attempt={} pid={}{} cmd={}", attempt, *pid,
                          track ? " step=" + StepString(before) : "", CommandLine(o_.command)));
    RunEnd end = GroupWaiter(*pid, o_.grace, log_).Wait();
    const auto after = Newest();
    bool progress = after.has_value() && (!before || *after > *before);
    // Through an agent: progress is a step saved past the one restored (the
    // agent counts steps per start of the job); unknown if it is unreachable.
    bool known = true;
    bool restored_in_run = true;  // the run's start restored (or started fresh)
    if (o_.agent) {
      known = after.has_value();
      const auto restored = o_.agent->restored();
      progress = known && *after >= 0 && *after > restored.value_or(-1);
      if (o_.agent->start) {
        const auto start_after = o_.agent->start();
        restored_in_run = start_after.has_value() && start_after != start_before;
        // Without a start of its own, a run progressed only if it saved.
        if (!restored_in_run) progress = progress && before && *after > *before;
      }
    }
    Log(log_,
        fmt::format("exit attempt={} {} runtime={:.3f}s{}", attempt, DescribeStatus(end.status),
                    Seconds(end.length),
                    !track ? ""
                           : fmt::format(" step={}->{} {}", StepString(before), StepString(after),
                                         progress ? "progress" : "no-progress")));
    if (progress) NoteProgressPast(after);
    const int code = ExitCode(end.status);
    if (end.forwarded) {
      Log(log_, fmt::format("stopped by {}: exiting with the command's {}",
                            SignalName(end.forwarded), DescribeStatus(end.status)));
      return code;
    }
    if (code == 0) return 0;
    if (code == kExitDoNotRestart) {
      Log(log_, fmt::format("the command asked not to be restarted (exit code {})", code));
      return code;
    }
    const bool planned = code == kExitRestartNow;
    const int quarantines_before = quarantines_;
    if (planned) {
      Log(log_, fmt::format("the command stopped after its on-demand checkpoint (exit code {}): "
                            "restarting at once",
                            code));
    } else if (!known) {
      Log(log_, "progress unknown (the agent did not answer): not counted toward a crash loop");
    } else if (!progress && !restored_in_run) {
      Log(log_,
          "the run ended before its start of the job restored a step: not counted toward "
          "a crash loop");
    } else if (auto stop = AfterFailure(progress, after)) {
      return *stop;
    }
    if (o_.max_restarts && restarts >= *o_.max_restarts) {
      return GiveUp(fmt::format("the command failed {} time(s); --max-restarts {} reached", attempt,
                                *o_.max_restarts));
    }
    if (progress || end.length >= o_.reset_after) backoff_n = 0;
    milliseconds delay =
        planned ? milliseconds(0) : BackoffDelay(backoff_n++, o_.backoff_min, o_.backoff_max, rng_);
    if (o_.on_restart) {  // before the wait: a signal during the report cuts the wait
      o_.on_restart(planned                             ? "planned"
                    : quarantines_ > quarantines_before ? "quarantined"
                                                        : "failed",
                    code);
    }
    if (!planned) {
      Log(log_,
          fmt::format("backoff {:.3f}s before attempt={}", delay.count() / 1000.0, attempt + 1));
    }
    if (int sig = Sleep(delay)) {
      Log(log_, fmt::format("stopped by {} during the backoff wait", SignalName(sig)));
      return 128 + sig;
    }
    ++restarts;
  }
}

}  // namespace

milliseconds BackoffDelay(int n, milliseconds min, milliseconds max, std::mt19937_64& rng) {
  double d = static_cast<double>(min.count()) * std::ldexp(1.0, std::min(n, 62));
  d = std::min(d, static_cast<double>(std::max(min, max).count()));
  std::uniform_real_distribution<double> upper_half(d / 2, d);
  return milliseconds(static_cast<int64_t>(std::llround(upper_half(rng))));
}

StatusOr<milliseconds> ParseDuration(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  std::string_view unit(end);
  double scale = unit.empty() || unit == "s" ? 1000
                 : unit == "ms"              ? 1
                 : unit == "m"               ? 60000
                 : unit == "h"               ? 3600000
                                             : -1;
  if (s.empty() || end == s.c_str() || errno != 0 || scale < 0 || !(v >= 0) || v > 1e9) {
    return InvalidArgumentError("bad duration \"" + s + "\" (want e.g. 300s, 5m, 1h, 250ms)");
  }
  return milliseconds(static_cast<int64_t>(std::llround(v * scale)));
}

StatusOr<std::string> QuarantineStep(const std::string& dir, int64_t step) {
  // The command is gone, but an orphan of it, or someone else, might still
  // have the directory open in a Checkpointer: never rename under it.
  STRATA_ASSIGN_OR_RETURN(const UniqueFd lock,
                          LockFileExclusive(JoinPath(dir, kLockFileName),
                                            dir + " is still in use by a Strata checkpointer",
                                            /*write_pid=*/false));
  Env* env = Env::Default();
  std::string name;
  for (int n = 0; name.empty() || env->Exists(JoinPath(dir, name)); ++n) {
    name = QuarantineDirName(step, n);
  }
  STRATA_RETURN_IF_ERROR(env->Rename(JoinPath(dir, StepDirName(step)), JoinPath(dir, name)));
  STRATA_RETURN_IF_ERROR(env->SyncDir(dir));
  return name;
}

int Supervise(const SupervisorOptions& options, std::ostream& log) {
  const sigset_t set = WatchedSignals();
  sigset_t old;
  ::pthread_sigmask(SIG_BLOCK, &set, &old);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // best effort: orphans are reaped by init otherwise
  int code = Supervisor(options, log).Run();
  while (WaitSignal(milliseconds(0)) != 0) {
  }  // drop pending signals so unblocking cannot kill us
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return code;
}

}  // namespace strata::supervisor
