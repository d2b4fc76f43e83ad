// Copyright 2026 The Strata Authors.
#include "agent/node/goodput.h"

#include <algorithm>
#include <chrono>

namespace strata::agent {

namespace {

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void GoodputLedger::Sample(TimePoint now, int64_t step,
                           const std::vector<wire::StatusReply::Rank>& ranks) {
  MutexLock l(&mu_);
  // Stalls: each rank's growth since the last sample, shared by the ranks
  // (they stall side by side, not one after another).
  // A pid seen for the first time sets its baseline: its slot may hold what
  // a previous holder counted (a library older than the stall fields does
  // not reset them when it claims a slot).
  std::map<int64_t, double> seen;
  double grown = 0;
  for (const auto& r : ranks) {
    if (!r.save_stall_seconds) continue;
    auto before = stall_seen_.find(r.pid);
    if (before != stall_seen_.end()) grown += std::max(0.0, *r.save_stall_seconds - before->second);
    seen[r.pid] = *r.save_stall_seconds;
  }
  if (!seen.empty()) stall_seconds_ += grown / static_cast<double>(seen.size());
  stall_seen_ = std::move(seen);
  ranks_live_ = !ranks.empty();
  if (running_ && ranks_live_) last_live_ = now;
  if (running_ && step > newest_) {
    newest_ = step;
    last_progress_ = now;
  }
}

void GoodputLedger::StartBegan(TimePoint now) {
  MutexLock l(&mu_);
  if (!first_start_) first_start_ = now;
  if (start_began_) return;  // a start that was superseded: the same one goes on
  start_began_ = now;
  if (running_) {  // the run before ended at its last progress
    trained_seconds_ += Seconds(RunEnd() - run_began_);
    trained_steps_ += std::max<int64_t>(0, newest_ - run_first_step_);
    interrupted_at_ = newest_;
    running_ = false;
  }
}

void GoodputLedger::StartDone(TimePoint now, int64_t restored) {
  MutexLock l(&mu_);
  if (!start_began_) return;
  restore_seconds_ += Seconds(now - *start_began_);
  start_began_.reset();
  const int64_t resume = std::max<int64_t>(0, restored);
  if (interrupted_at_ >= 0) {
    ++interruptions_;
    wasted_steps_ += std::max<int64_t>(0, interrupted_at_ - resume);
    interrupted_at_ = -1;
  }
  running_ = true;
  run_began_ = last_progress_ = last_live_ = now;
  run_first_step_ = newest_ = resume;
}

std::optional<wire::Goodput> GoodputLedger::Report(TimePoint now) const {
  MutexLock l(&mu_);
  if (!first_start_) return std::nullopt;
  double trained = trained_seconds_;
  int64_t steps = trained_steps_;
  if (running_) {  // the run goes on: up to now while ranks live, else to its last progress
    trained += Seconds((ranks_live_ ? now : RunEnd()) - run_began_);
    steps += std::max<int64_t>(0, newest_ - run_first_step_);
  }
  wire::Goodput g;
  g.elapsed_seconds = Seconds(now - *first_start_);
  g.save_seconds = std::min(stall_seconds_, trained);
  const double compute = trained - g.save_seconds;
  const double per_step = steps > 0 ? compute / static_cast<double>(steps) : 0;
  g.wasted_seconds = std::min(compute, per_step * static_cast<double>(wasted_steps_));
  g.productive_seconds = compute - g.wasted_seconds;
  g.restore_seconds = restore_seconds_ + (start_began_ ? Seconds(now - *start_began_) : 0);
  g.other_seconds = std::max(0.0, g.elapsed_seconds - trained - g.restore_seconds);
  g.step = running_ ? newest_ : std::max<int64_t>(newest_, interrupted_at_);
  g.wasted_steps = wasted_steps_;
  g.interruptions = interruptions_;
  g.goodput = g.elapsed_seconds > 0 ? g.productive_seconds / g.elapsed_seconds : 0;
  return g;
}

}  // namespace strata::agent
