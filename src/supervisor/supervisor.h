// Copyright 2026 The Strata Authors.
//
// The retry supervisor behind `strata run`: restarts a training command until
// it exits 0, with exponential backoff, signal forwarding, a "do not restart"
// exit code and, given the checkpoint directory, crash-loop detection that
// quarantines the newest step. See docs/operations.md.
//
// Progress is read from the checkpoint directory with the public catalog
// API (ListSteps), never from the command's output: a run made progress iff
// the newest committed step after it is newer than before it.
#ifndef STRATA_SUPERVISOR_SUPERVISOR_H_
#define STRATA_SUPERVISOR_SUPERVISOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "strata/status.h"

namespace strata::supervisor {

// A command exits with this to say "do not restart me"; the supervisor then
// exits with it too. 86 is unused by sysexits.h, shells (126, 127, 128+n) and
// common runtimes.
inline constexpr int kExitDoNotRestart = 86;
// A command that stopped after its on-demand checkpoint (a maintenance
// notice reached the job: strata::kExitAfterOnDemand, EX_TEMPFAIL) exits
// with this. It is restarted at once, without backoff, and the run is not
// counted toward a crash loop (it counts toward --max-restarts).
inline constexpr int kExitRestartNow = 75;
// The supervisor gave up (restart limit, crash loop, quarantine limit) or
// could not supervise at all (directory locked or unusable).
inline constexpr int kExitGaveUp = 1;
// The command could not be started (not found, not executable).
inline constexpr int kExitCannotStart = 127;

// Where progress comes from when the checkpoint directory is managed by a
// node agent (`strata run --agent`): `newest` is the newest step the
// command saved since the job last started (-1: none; nullopt: the agent
// did not answer), `restored` the step that start restored (nullopt: none),
// and `quarantine` makes the job never restore `step` again, returning a
// description of what it did. A run made progress iff newest > restored.
//
// `start` identifies this node's latest start of the job (the agent's
// incarnation round; nullopt: none, or the agent did not answer). A run
// during which it did not change ended before its start restored anything
// (it could not write its replicator.yaml, say, on a full disk): its
// failure says nothing about the restored step and is not counted toward a
// crash loop.
struct ProgressHooks {
  std::function<std::optional<int64_t>()> newest;
  std::function<std::optional<int64_t>()> restored;
  std::function<StatusOr<std::string>(int64_t step)> quarantine;
  std::function<std::optional<int64_t>()> start;
};

struct SupervisorOptions {
  // argv of the command; argv[0] is looked up in PATH. Required.
  std::vector<std::string> command;
  // Restarts after the first run; nullopt (default): no limit.
  std::optional<int> max_restarts;
  // The wait before the n-th restart since the last reset is
  // min(backoff_max, backoff_min * 2^n), jittered to a uniformly random point
  // in its upper half.
  std::chrono::milliseconds backoff_min{std::chrono::seconds(1)};
  std::chrono::milliseconds backoff_max{std::chrono::minutes(5)};
  // A run that lasted at least this long resets the backoff to backoff_min,
  // as does a run that made progress.
  std::chrono::milliseconds reset_after{std::chrono::minutes(10)};
  // After forwarding SIGTERM/SIGINT (or when the command exited and left
  // processes behind in its group), how long to wait before SIGKILL.
  std::chrono::milliseconds grace{std::chrono::seconds(300)};
  // A Strata checkpoint directory written by the command's Checkpointer.
  // Empty (default): progress detection, crash loops and the lock are off;
  // only max_restarts limits the restarts.
  std::string checkpoint_dir;
  // Instead of checkpoint_dir: progress and quarantine through the agent.
  std::optional<ProgressHooks> agent;
  // This many failed runs in a row without progress are a crash loop: the
  // newest step is quarantined. Default 3.
  int crash_loop_runs = 3;
  // A crash loop that would need more quarantines than this gives up. The
  // count starts again once a run saves a step past the newest quarantined
  // one (a long job survives separate crash loops; a loop that keeps
  // failing before it gets there, as a bad batch does, still gives up).
  int max_quarantines = 3;
  // Seed of the jitter; 0: random.
  uint64_t seed = 0;
  // Called for each restart decided, before the backoff wait: why ("failed",
  // "planned" for kExitRestartNow, "quarantined" after a crash loop's
  // quarantine) and the exit code of the run that ended. `strata run
  // --agent` reports it to the agent (strata_supervisor_restarts_total).
  std::function<void(std::string_view reason, int exit_code)> on_restart;
};

// Runs options.command until it exits 0 and returns the supervisor's exit
// code: 0 the command finished; the command's own code (128+signal when it
// died of one) after a forwarded SIGTERM/SIGINT or when it exited with
// kExitDoNotRestart; 128+signal when the signal came during a backoff wait;
// kExitGaveUp or kExitCannotStart with a message. Logs one line per event to
// `log`.
//
// The command runs in a new process group; SIGTERM and SIGINT received by the
// supervisor are forwarded to that whole group and the command is never
// restarted after one. The calling thread blocks SIGTERM, SIGINT and SIGCHLD
// while this runs, and this process becomes a child subreaper so it can reap
// the group's orphans.
// REQUIRES: no other thread of this process unblocks those signals or waits
// for child processes (the `strata` binary is single-threaded here).
int Supervise(const SupervisorOptions& options, std::ostream& log);

// The jittered wait before the n-th restart (n from 0) since the last reset.
std::chrono::milliseconds BackoffDelay(int n, std::chrono::milliseconds min,
                                       std::chrono::milliseconds max, std::mt19937_64& rng);

// "300s", "5m", "1h", "250ms", "1.5s", or a bare number of seconds.
StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);

// Renames `dir/<step>` to the first free QuarantineDirName(step, n), so the
// catalog and the Checkpointer no longer see it, and syncs `dir`. Fails
// (FAILED_PRECONDITION) if a Checkpointer holds the directory. Returns the
// new name.
StatusOr<std::string> QuarantineStep(const std::string& dir, int64_t step);

}  // namespace strata::supervisor

#endif  // STRATA_SUPERVISOR_SUPERVISOR_H_
