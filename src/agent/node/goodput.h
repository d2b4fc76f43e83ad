// Copyright 2026 The Strata Authors.
//
// GoodputLedger: where a job's time on this node went, in the categories of
// Google's ML goodput measurement: productive training, checkpoint save
// badput (the ranks blocked in Save()), restore badput (from a start's
// replicator.yaml to its data in place), wasted progress (training of steps
// an interruption lost, recomputed after it) and the rest (the job down
// between an interruption and its next start: process restarts,
// scheduling, backoff). `strata goodput` and the metrics read it
// (docs/operations.md).
//
// Fed by the agent: Sample() from the run loop every 50 ms (the ranks' step
// and their cumulative Save() stalls, from the sync map), StartBegan()/StartDone()
// around each start of the job. Times are the agent's SteadyClock; the
// ledger covers the job since this agent first saw it start (an agent
// restart begins a new ledger). Thread-safe.
#ifndef STRATA_AGENT_NODE_GOODPUT_H_
#define STRATA_AGENT_NODE_GOODPUT_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "util/clock.h"
#include "util/mutex.h"
#include "wire/control.h"

namespace strata::agent {

class GoodputLedger {
 public:
  using TimePoint = SteadyClock::time_point;

  // The ranks checked `step` (-1: none yet) at `now`; `ranks` are the live
  // ranks with their cumulative stalls. A run's training time ends at its
  // last sample with live ranks or with progress, whichever is later (a
  // run whose steps all fell between two samples still trained).
  void Sample(TimePoint now, int64_t step, const std::vector<wire::StatusReply::Rank>& ranks)
      EXCLUDES(mu_);
  // A start of the job began (a complete yaml taken), and it ended with
  // the ranks restoring `restored` (-1: a fresh start). A start that never
  // ends is followed by another StartBegan.
  void StartBegan(TimePoint now) EXCLUDES(mu_);
  void StartDone(TimePoint now, int64_t restored) EXCLUDES(mu_);

  // Nothing before the job's first start here.
  std::optional<wire::Goodput> Report(TimePoint now) const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::optional<TimePoint> first_start_ GUARDED_BY(mu_);
  std::optional<TimePoint> start_began_ GUARDED_BY(mu_);  // a start under way
  bool running_ GUARDED_BY(mu_) = false;                  // ranks training since StartDone
  bool ranks_live_ GUARDED_BY(mu_) = false;               // at the last sample
  TimePoint run_began_ GUARDED_BY(mu_){};
  TimePoint last_progress_ GUARDED_BY(mu_){};
  TimePoint last_live_ GUARDED_BY(mu_){};        // last sample of the run with ranks live
  int64_t run_first_step_ GUARDED_BY(mu_) = 0;   // the step the run resumed after
  int64_t newest_ GUARDED_BY(mu_) = 0;           // newest step trained in the run
  int64_t interrupted_at_ GUARDED_BY(mu_) = -1;  // newest step when the last run ended
  double trained_seconds_ GUARDED_BY(mu_) = 0;   // of runs ended (to their last progress)
  int64_t trained_steps_ GUARDED_BY(mu_) = 0;    // of runs ended
  double restore_seconds_ GUARDED_BY(mu_) = 0;
  double stall_seconds_ GUARDED_BY(mu_) = 0;
  int64_t wasted_steps_ GUARDED_BY(mu_) = 0;
  int64_t interruptions_ GUARDED_BY(mu_) = 0;
  std::map<int64_t, double> stall_seen_ GUARDED_BY(mu_);  // pid -> its cumulative stall

  TimePoint RunEnd() const REQUIRES(mu_) { return std::max(last_progress_, last_live_); }
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_GOODPUT_H_
