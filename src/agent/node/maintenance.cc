// Copyright 2026 The Strata Authors.
#include "agent/node/maintenance.h"

#include <signal.h>

#include <algorithm>

#include "agent/metrics/agent_metrics.h"
#include "agent/rpc/client.h"
#include "format/naming.h"
#include "format/sync_map.h"
#include "util/file_util.h"
#include "util/json_bounded.h"
#include "util/logging.h"
#include "util/time_format.h"
#include "wire/json.h"

namespace strata::agent {
Maintenance::Maintenance(Env* env, SteadyClock* clock, std::string record_path, Parts parts,
                         Hooks hooks)
    : env_(env),
      clock_(clock),
      record_path_(std::move(record_path)),
      parts_(parts),
      hooks_(std::move(hooks)) {
  Load();
}

bool Maintenance::PollUntil(SteadyClock::time_point deadline,
                            const std::function<bool()>& done) const {
  return strata::PollUntil(*clock_, deadline, done, hooks_.stopping);
}

bool Maintenance::OnDemandStepReplicated() const {
  const int64_t step = parts_.sync->step();
  if (step == kNoSyncStep) return true;
  std::optional<Job> job = hooks_.job();
  return !job || !job->has_peers || parts_.replication->Replicated(step);
}

bool Maintenance::TakeYaml(bool complete) {
  MutexLock l(&mu_);
  yaml_deferred_ |= complete;
  if (!yaml_deferred_ || since_) return false;
  yaml_deferred_ = false;
  return true;
}

void Maintenance::AwaitOnDemandReplicated(const std::string& job) {
  constexpr auto kLimit = std::chrono::seconds(30);
  std::optional<Job> current = hooks_.job();
  if (!current || current->name != job || OnDemandStepReplicated()) return;
  Log()->info("the job restarted: replicating on-demand step {} first", parts_.sync->step());
  if (!PollUntil(clock_->Now() + kLimit, [this] { return OnDemandStepReplicated(); })) {
    Log()->warn("on-demand step {} not on every peer after {} s; the restart goes ahead",
                parts_.sync->step(), kLimit.count());
  }
}

// The copy a lost node needs first is the on-demand step on the peers; with
// its peers down, the backup is the only other copy there will be, so the
// wait ends a minute after the step was decided.
void Maintenance::YieldToOnDemandReplication() {
  constexpr auto kLimit = std::chrono::minutes(1);
  bool logged = false;
  PollUntil(SteadyClock::time_point::max(), [&] {
    if (OnDemandStepReplicated() || clock_->Now() - parts_.sync->decided_at() >= kLimit) {
      return true;
    }
    if (!logged) {
      Log()->info("backup upload paused: on-demand step {} replicates first", parts_.sync->step());
    }
    logged = true;
    return false;
  });
}

SteadyClock::time_point Maintenance::BeginDrain(std::chrono::seconds grace) {
  auto ranks = parts_.sync->LiveRanks();
  Log()->warn("SIGTERM: draining for at most {} s ({} rank(s) here); a second signal stops now",
              grace.count(), ranks.size());
  if (!ranks.empty()) parts_.sync->PostNotice("SIGTERM to the agent");
  return clock_->Now() + grace;
}

bool Maintenance::DrainOver(SteadyClock::time_point deadline) const {
  if (clock_->Now() >= deadline) return true;
  return parts_.sync->LiveRanks().empty() && parts_.sync->NoticeHeard() && OnDemandStepReplicated();
}

StatusOr<wire::MaintenanceEvent> Maintenance::Handle(const wire::MaintenanceRequest& request) {
  const std::string& dir = parts_.local->path();
  const std::chrono::milliseconds grace = request.grace;
  const bool lose_ram = request.lose_ram;
  const int64_t started_ms = UnixMillisNow();
  {
    MutexLock l(&mu_);
    if (since_) {
      return FailedPreconditionError("a maintenance event is in progress on " + dir + " since " +
                                     Rfc3339(*since_));
    }
    since_ = started_ms;
  }
  const auto start = clock_->Now(), deadline = start + grace;
  auto ranks = parts_.sync->LiveRanks();
  Log()->warn("maintenance event: SIGTERM to {} rank(s) using {}, grace {} ms{}", ranks.size(), dir,
              grace.count(), lose_ram ? ", the node loses its RAM" : "");
  metric::MaintenanceEvents().Add();
  wire::MaintenanceEvent event;
  event.time = Rfc3339(started_ms);
  event.unix_ms = started_ms;
  event.origin = request.origin;
  event.grace_ms = grace.count();
  event.lose_ram = lose_ram;
  event.ranks = static_cast<int>(ranks.size());
  parts_.sync->PostNotice("strata maintenance");
  StopRanks(ranks, deadline, event);
  AwaitOnDemandStep(lose_ram, deadline, event);
  if (lose_ram) {
    if (!event.replicated) {
      Log()->error("maintenance: {}; wiping the RAM of {} anyway (the platform would not wait)",
                   event.sync_step ? "on-demand step " + std::to_string(*event.sync_step) +
                                         " not on every peer within the grace period"
                                   : std::string("no on-demand step was saved"),
                   dir);
    }
    // A restart that began before the event is restoring from this store:
    // let it finish (within the grace period) rather than pull it away.
    PollUntil(deadline, [this] { return !hooks_.restoring(); });
    WipeRam();
  }
  event.wiped = lose_ram;
  event.seconds = SecondsSince(*clock_, start);
  Record(event);
  return event;
}

void Maintenance::StopRanks(const std::vector<std::pair<int, int64_t>>& ranks,
                            SteadyClock::time_point deadline, wire::MaintenanceEvent& event) {
  const auto start = clock_->Now();
  OnDemandSync* sync = parts_.sync;
  for (auto [i, pid] : ranks) sync->SignalRank(i, pid, SIGTERM);
  // A rank may release its slot well before its process is gone (a
  // framework's teardown): wait for the process.
  PollUntil(deadline, [&] {
    return std::none_of(ranks.begin(), ranks.end(),
                        [sync](const auto& r) { return sync->RankAlive(r.first, r.second); });
  });
  event.ranks_exited_seconds = SecondsSince(*clock_, start);
  int killed = 0;
  for (auto [i, pid] : ranks) {
    if (sync->RankAlive(i, pid) && sync->SignalRank(i, pid, SIGKILL)) ++killed;
  }
  event.ranks_killed = killed;
}

// The ranks' on-demand step, once the main loop has taken it in.
void Maintenance::AwaitOnDemandStep(bool on_peers, SteadyClock::time_point deadline,
                                    wire::MaintenanceEvent& event) {
  int64_t sync = kNoSyncStep;
  bool saved = false, replicated = false;
  PollUntil(deadline, [&] {
    sync = parts_.sync->step();
    std::optional<Job> job = hooks_.job();
    saved = sync != kNoSyncStep && job && parts_.store->Has({job->name, job->node, sync});
    replicated = saved && OnDemandStepReplicated();
    return sync == kNoSyncStep || (saved && (replicated || !on_peers));
  });
  if (sync != kNoSyncStep) event.sync_step = sync;
  event.saved = saved;
  event.replicated = replicated;
}

// The agent's own state (job, sync map, event records) stays, as a
// restarted agent would rebuild it.
void Maintenance::WipeRam() {
  parts_.replication->DropQueue();
  if (parts_.backup != nullptr) parts_.backup->DropPins();
  Store* store = parts_.store;
  for (const auto& [key, index] : store->List()) store->Remove(key).IgnoreError();
  if (parts_.parity != nullptr) {
    for (const auto& [key, shard] : parts_.parity->List()) parts_.parity->Remove(key).IgnoreError();
  }
  store->DropSpare();                               // the RAM is gone, spare files too
  Status s = parts_.local->Clean(kReplicatorYaml);  // a deferred yaml stays
  if (!s.ok()) Log()->error("wiping {}: {}", parts_.local->path(), s.message());
  parts_.replication->Forget();
  parts_.sync->ForgetStep();
  Log()->warn("wiped the RAM of {}: this node holds nothing now", parts_.local->path());
}

// The record's I/O happens outside mu_ (only the event's thread writes it).
void Maintenance::Record(const wire::MaintenanceEvent& event) {
  {
    MutexLock l(&mu_);
    last_ = event;
    since_.reset();
  }
  Status s = WriteFileAtomic(env_, record_path_, event.ToJson().dump());
  if (!s.ok()) Log()->warn("recording the maintenance event in {}: {}", record_path_, s.message());
}

void Maintenance::Load() {
  auto text = ReadFileToString(env_, record_path_, 1 << 16);
  if (!text.ok()) return;
  StatusOr<wire::MaintenanceEvent> event = wire::MaintenanceEvent::FromJson(ParseBounded(*text));
  if (!event.ok()) {
    Log()->warn("ignoring the maintenance record {}: {}", record_path_, event.status().message());
    return;
  }
  MutexLock l(&mu_);
  last_ = std::move(*event);
}

std::optional<int64_t> Maintenance::since() const {
  MutexLock l(&mu_);
  return since_;
}

std::optional<wire::MaintenanceEvent> Maintenance::last() const {
  MutexLock l(&mu_);
  return last_;
}

}  // namespace strata::agent
