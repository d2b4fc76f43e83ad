// Copyright 2026 The Strata Authors.
//
// Maintenance events at the agent, around its OnDemandSync component
// (ondemand_sync.h: the sync map, notices to the coordinator, the job's
// on-demand step):
//   * a drain: the agent's own SIGTERM;
//   * `strata maintenance`: SIGTERM to the registered ranks, wait for them,
//     optionally hold the node until its on-demand step is on its peers and
//     wipe its RAM; an event record;
//   * `strata health`.
#include <signal.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <thread>

#include "agent/agent.h"
#include "agent/local_dir.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/time_format.h"

namespace strata::agent {
namespace {

constexpr auto kSlotPoll = std::chrono::milliseconds(50);
// A RAM disk fuller than this is unhealthy: the next save may not fit.
constexpr double kRamBudget = 0.95;
// Replication behind, with an error, for longer than this: unhealthy.
constexpr std::chrono::seconds kReplicationTrouble(60);

}  // namespace

// Polls `done` until it holds, `deadline` passes or the agent stops; true
// if it held.
bool Agent::PollUntil(SteadyClock::time_point deadline, const std::function<bool()>& done) const {
  for (;;) {
    if (done()) return true;
    if (clock_->Now() >= deadline || Stopping()) return false;
    std::this_thread::sleep_for(kSlotPoll);
  }
}

Status Agent::OpenOnDemandSync() {
  OnDemandSync::Hooks hooks;
  hooks.call_coordinator = CoordinatorCaller();
  hooks.coordinator = [this](const ReplicatorConfig& job) { return CoordinatorEndpoint(job); };
  hooks.stopping = [this] { return Stopping(); };
  STRATA_ASSIGN_OR_RETURN(
      sync_, OnDemandSync::Open(JoinPath(store_->root(), std::string(kSyncMapName)), config_.secret,
                                clock_, std::move(hooks)));
  LoadMaintenance();
  return Status::Ok();
}

bool Agent::SyncStepReplicated() const {
  const int64_t step = sync_->step();
  if (step == kNoSyncStep || !inc_) return true;
  return inc_->peers.empty() || replication_->Replicated(step);
}

void Agent::AwaitOnDemandReplicated(const std::string& job) {
  constexpr auto kLimit = std::chrono::seconds(30);
  const auto deadline = clock_->Now() + kLimit;
  auto replicated = [this] {
    MutexLock l(&mu_);
    return SyncStepReplicated();
  };
  {
    MutexLock l(&mu_);
    if (!inc_ || inc_->config.job_name != job || SyncStepReplicated()) return;
  }
  Log()->info("the job restarted: replicating on-demand step {} first", sync_->step());
  if (!PollUntil(deadline, replicated)) {
    Log()->warn("on-demand step {} not on every peer after {} s; the restart goes ahead",
                sync_->step(), kLimit.count());
  }
}

SteadyClock::time_point Agent::BeginDrain() {
  auto ranks = sync_->LiveRanks();
  Log()->warn("SIGTERM: draining for at most {} s ({} rank(s) here); a second signal stops now",
              config_.grace.count(), ranks.size());
  if (!ranks.empty()) sync_->PostNotice("SIGTERM to the agent");
  return clock_->Now() + config_.grace;
}

// One look at a drain; true when it is over.
bool Agent::DrainStep(SteadyClock::time_point deadline) {
  if (clock_->Now() >= deadline) return true;
  const bool ranks_gone = sync_->LiveRanks().empty();
  const bool heard = sync_->NoticeHeard();
  MutexLock l(&mu_);
  return ranks_gone && SyncStepReplicated() && heard;
}

StatusOr<json> Agent::HandleMaintenance(const wire::MaintenanceRequest& request) {
  const std::chrono::milliseconds grace = request.grace;
  const bool lose_ram = request.lose_ram;
  const int64_t started_ms = UnixMillisNow();
  {
    MutexLock l(&mu_);
    if (maintenance_since_) {
      return FailedPreconditionError("a maintenance event is in progress on " + config_.local_dir +
                                     " since " + Rfc3339(*maintenance_since_));
    }
    maintenance_since_ = started_ms;
  }
  const auto start = clock_->Now(), deadline = start + grace;
  auto ranks = sync_->LiveRanks();
  Log()->warn("maintenance event: SIGTERM to {} rank(s) using {}, grace {} ms{}", ranks.size(),
              config_.local_dir, grace.count(), lose_ram ? ", the node loses its RAM" : "");
  wire::MaintenanceEvent event;
  event.time = Rfc3339(started_ms);
  event.unix_ms = started_ms;
  event.origin = request.origin;
  event.grace_ms = grace.count();
  event.lose_ram = lose_ram;
  event.ranks = static_cast<int>(ranks.size());
  sync_->PostNotice("strata maintenance");
  StopRanks(ranks, deadline, event);
  AwaitOnDemandStep(lose_ram, deadline, event);
  if (lose_ram) {
    if (!event.replicated) {
      Log()->error(
          "maintenance: {} not on every peer within the grace period; wiping the RAM of "
          "{} anyway (the platform would not wait)",
          event.sync_step ? "on-demand step " + std::to_string(*event.sync_step)
                          : std::string("no on-demand step was saved, so nothing is"),
          config_.local_dir);
    }
    // A restart that began before the event is restoring from this store:
    // let it finish (within the grace period) rather than pull it away.
    PollUntil(deadline, [this] { return !restoring_; });
    WipeRam();
  }
  event.wiped = lose_ram;
  event.seconds = SecondsSince(*clock_, start);
  RecordMaintenance(event);
  return event.ToJson();
}

void Agent::StopRanks(const std::vector<std::pair<int, int64_t>>& ranks,
                      SteadyClock::time_point deadline, wire::MaintenanceEvent& event) {
  const auto start = clock_->Now();
  for (auto [i, pid] : ranks) ::kill(static_cast<pid_t>(pid), SIGTERM);
  // A rank may release its slot well before its process is gone (a
  // framework's teardown): wait for the process.
  PollUntil(deadline, [&] {
    return std::none_of(ranks.begin(), ranks.end(),
                        [](const auto& r) { return ProcessAlive(r.second); });
  });
  event.ranks_exited_seconds = SecondsSince(*clock_, start);
  int killed = 0;
  for (auto [i, pid] : ranks) {
    if (ProcessAlive(pid) && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
  }
  event.ranks_killed = killed;
}

// The ranks' on-demand step, once the main loop has taken it in.
void Agent::AwaitOnDemandStep(bool on_peers, SteadyClock::time_point deadline,
                              wire::MaintenanceEvent& event) {
  int64_t sync = kNoSyncStep;
  bool saved = false, replicated = false;
  PollUntil(deadline, [&] {
    sync = sync_->step();
    MutexLock l(&mu_);
    saved = sync != kNoSyncStep && inc_ &&
            store_->Has({inc_->config.job_name, inc_->config.node_rank, sync});
    replicated = saved && SyncStepReplicated();
    return sync == kNoSyncStep || (saved && (replicated || !on_peers));
  });
  if (sync != kNoSyncStep) event.sync_step = sync;
  event.saved = saved;
  event.replicated = replicated;
}

StatusOr<json> Agent::HandleQuarantine(const wire::QuarantineRequest& request) {
  std::optional<SyncJob> job = sync_->job();
  if (!job) {
    return FailedPreconditionError("quarantine of step " + std::to_string(request.step) +
                                   ": the agent of " + config_.local_dir + " has no job yet");
  }
  wire::QuarantineStepRequest req;
  req.job = job->config.job_name;
  req.node = job->config.node_rank;
  req.step = request.step;
  return CallCoordinator(job->config, req.ToJson(), std::chrono::seconds(10));
}

// The node comes back empty: every step the agent holds and every client
// file goes. The agent's own state (job, sync map, event records) stays, as
// a restarted agent would rebuild it.
void Agent::WipeRam() {
  replication_->DropQueue();
  if (backup_) backup_->DropPins();
  for (const auto& [key, index] : store_->List()) store_->Remove(key).IgnoreError();
  store_->DropSpare();                       // the RAM is gone, spare files too
  Status s = local_.Clean(kReplicatorYaml);  // a deferred yaml stays
  if (!s.ok()) Log()->error("wiping {}: {}", config_.local_dir, s.message());
  replication_->Forget();
  sync_->ForgetStep();
  Log()->warn("wiped the RAM of {}: this node holds nothing now", config_.local_dir);
}

// The record's I/O happens outside mu_ (only the maintenance call writes it).
void Agent::RecordMaintenance(const wire::MaintenanceEvent& event) {
  {
    MutexLock l(&mu_);
    last_maintenance_ = event;
    maintenance_since_.reset();
  }
  Status s = WriteFileAtomic(env_, JoinPath(store_->root(), std::string(kMaintenanceFile)),
                             event.ToJson().dump());
  if (!s.ok()) Log()->warn("recording the maintenance event: {}", s.message());
}

void Agent::LoadMaintenance() {
  auto text =
      ReadFileToString(env_, JoinPath(store_->root(), std::string(kMaintenanceFile)), 1 << 16);
  if (!text.ok()) return;
  StatusOr<wire::MaintenanceEvent> event = wire::MaintenanceEvent::FromJson(ParseBounded(*text));
  if (!event.ok()) {
    Log()->warn("ignoring the maintenance record in {}: {}", store_->root(),
                event.status().message());
    return;
  }
  MutexLock l(&mu_);
  last_maintenance_ = std::move(*event);
}

// The first problem found, else the newest maintenance event.
wire::HealthReply Agent::HealthReport() const {
  auto unhealthy = [](const std::string& why) {
    return wire::HealthReply{false, why, std::nullopt};
  };
  std::string failed;
  auto f = ReadFileToString(env_, JoinPath(config_.local_dir, std::string(kFailedFile)), 4096);
  if (f.ok()) failed = *f;
  struct statvfs st {};
  double fill = 0;
  if (::statvfs(config_.local_dir.c_str(), &st) == 0 && st.f_blocks > 0) {
    fill = 1.0 - static_cast<double>(st.f_bavail) / static_cast<double>(st.f_blocks);
  }
  MutexLock l(&mu_);
  if (maintenance_since_) {
    return unhealthy("A maintenance event is in progress since " + Rfc3339(*maintenance_since_));
  }
  if (!failed.empty()) {
    while (!failed.empty() && failed.back() == '\n') failed.pop_back();
    return unhealthy("The job failed on this node (" + std::string(kFailedFile) + "): " + failed);
  }
  const std::string access = backup_ ? backup_->access() : "ok";
  if (access != "ok" && access != "not checked yet") {
    return unhealthy("The backup " + config_.backup_url.value_or("") +
                     " is unreachable: " + access);
  }
  if (fill > kRamBudget) {
    return unhealthy(
        fmt::format("The RAM disk {} is over budget: {:.0f}% full", config_.local_dir, fill * 100));
  }
  if (std::optional<std::string> trouble = replication_->Trouble(kReplicationTrouble)) {
    return unhealthy(*trouble);
  }
  if (last_maintenance_) {
    return wire::HealthReply{true, "The node had a maintenance event at " + last_maintenance_->time,
                             last_maintenance_};
  }
  return wire::HealthReply{true, "No maintenance event recorded", std::nullopt};
}

}  // namespace strata::agent
