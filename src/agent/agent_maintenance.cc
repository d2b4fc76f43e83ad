// Copyright 2026 The Strata Authors.
//
// Maintenance events at the agent:
//   * the sync map (format/sync_map.h): the ranks register there, and the
//     agent publishes the job's on-demand step in it;
//   * notices: a rank's (its slot's notice count rises), the agent's own
//     SIGTERM (a drain) or `strata maintenance` go to the coordinator, which
//     decides one step for the job (coordinator_sync.cc);
//   * `strata maintenance`: SIGTERM to the registered ranks, wait for them,
//     optionally hold the node until its on-demand step is on its peers and
//     wipe its RAM; an event record;
//   * `strata health`.
#include <signal.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <deque>
#include <thread>

#include "agent/agent.h"
#include "agent/local_dir.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/time_format.h"
#include "wire/op.h"

namespace strata::agent {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSlotPoll = std::chrono::milliseconds(50);
constexpr auto kRateWindow = std::chrono::seconds(2);
// A RAM disk fuller than this is unhealthy: the next save may not fit.
constexpr double kRamBudget = 0.95;
// Replication behind, with an error, for longer than this: unhealthy.
constexpr std::chrono::seconds kReplicationTrouble(60);

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

std::optional<Agent::SyncJob> Agent::CurrentSyncJob() const {
  MutexLock l(&mu_);
  return sync_job_;
}

// Polls `done` until it holds, `deadline` passes or the agent stops; true
// if it held.
bool Agent::PollUntil(Clock::time_point deadline, const std::function<bool()>& done) const {
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline || Stopping()) return false;
    std::this_thread::sleep_for(kSlotPoll);
  }
}

Status Agent::OpenSyncMap() {
  STRATA_ASSIGN_OR_RETURN(
      sync_map_, SyncMap::OpenOrCreate(JoinPath(store_->root(), std::string(kSyncMapName))));
  // A step published by a previous agent process was for ranks that have
  // restarted since, or will see it again from the coordinator.
  sync_map_.Publish(kNoSyncStep, 0);
  LoadMaintenance();
  return Status::Ok();
}

std::vector<std::pair<int, int64_t>> Agent::LiveRanks() const {
  std::vector<std::pair<int, int64_t>> out;
  for (int i = 0; i < kSyncSlots; ++i) {
    int64_t pid = sync_map_.slot(i).pid.load();
    if (pid != 0 && ProcessAlive(pid)) out.emplace_back(i, pid);
  }
  return out;
}

// Watches the ranks: their step (and rate, for the coordinator's choice of
// the sync step) and their notices. Also withdraws a published step once
// every rank that was there when it was published has served it or exited.
void Agent::NoticeMain() {
  std::map<int, std::pair<int64_t, uint64_t>> seen;  // slot -> (pid, notices acted on)
  std::deque<std::pair<Clock::time_point, int64_t>> samples;
  Clock::time_point last_post{};
  while (!Stopping()) {
    std::this_thread::sleep_for(kSlotPoll);
    int64_t step = -1;
    std::string notice;
    for (auto [i, pid] : LiveRanks()) {
      const SyncSlot& s = sync_map_.slot(i);
      step = std::max(step, s.current_step.load(std::memory_order_relaxed));
      uint64_t n = s.notices.load();
      auto& [seen_pid, acted] = seen[i];
      if (seen_pid != pid) seen_pid = pid, acted = 0;
      if (n > acted) {
        acted = n;
        notice = "SIGTERM to rank pid " + std::to_string(pid);
      }
    }
    // The step rate over the last kRateWindow, from samples of running
    // ranks only (a restart, or no rank, starts the window again).
    const auto now = Clock::now();
    if (step < 0 || (!samples.empty() && step < samples.back().second)) samples.clear();
    if (step >= 0) samples.emplace_back(now, step);
    while (samples.size() > 2 && now - samples.front().first > kRateWindow) samples.pop_front();
    if (samples.size() >= 2) {
      double dt = std::chrono::duration<double>(now - samples.front().first).count();
      if (dt >= 0.1) node_rate_.store(static_cast<double>(step - samples.front().second) / dt);
    }
    node_step_.store(step);
    {
      MutexLock l(&mu_);
      if (published_sync_ != kNoSyncStep && RanksDone()) WithdrawSync("every rank served it");
      // A notice the coordinator has not heard yet: retry at most twice a second.
      if (notice.empty() && !notice_unsent_.empty() &&
          now - last_post > std::chrono::milliseconds(500)) {
        notice = notice_unsent_;
      }
    }
    if (!notice.empty()) {
      last_post = now;
      PostNotice(notice);
    }
  }
}

// True when no rank that was registered at publication
// still has to save the published step.
bool Agent::RanksDone() const {
  // Published before any rank registered (on "go", for ranks that open
  // their checkpointer after the markers): kept for a while for them.
  if (sync_pids_.empty()) return Clock::now() - ondemand_since_ > std::chrono::minutes(1);
  for (int64_t pid : sync_pids_) {
    for (int i = 0; i < kSyncSlots; ++i) {
      const SyncSlot& s = sync_map_.slot(i);
      if (s.pid.load() != pid || !ProcessAlive(pid)) continue;
      if (s.served.load() != sync_map_.header().generation.load()) return false;
    }
  }
  return true;
}

void Agent::PostNotice(const std::string& origin) {
  std::optional<SyncJob> job;
  {
    MutexLock l(&mu_);
    job = sync_job_;
    if (!job) {
      if (notice_unsent_ != origin) {
        Log()->warn("maintenance notice ({}) before this node joined a job: held until it does",
                    origin);
      }
      notice_unsent_ = origin;
      return;
    }
  }
  wire::NoticeRequest req;
  req.job = job->config.job_name;
  req.node = job->config.node_rank;
  req.step = node_step_.load();
  req.origin = origin;
  auto r = CallCoordinator(job->config, req.ToJson(), std::chrono::seconds(5));
  if (!r.ok()) {
    Log()->warn("telling the coordinator of a maintenance notice ({}): {} (will retry)", origin,
                r.status().message());
    MutexLock l(&mu_);
    notice_unsent_ = origin;  // NoticeMain retries
    return;
  }
  Log()->info("maintenance notice ({}) sent to the coordinator", origin);
  MutexLock l(&mu_);
  if (notice_unsent_ == origin) notice_unsent_.clear();
}

// One "sync" call at a time, each waiting at the coordinator for news, on
// one connection kept open between calls (a job of N nodes would otherwise
// cost the coordinator N handshakes per wait). ~Agent shuts the connection
// down to end a wait early.
void Agent::SyncPollMain() {
  constexpr auto kWait = std::chrono::seconds(10);
  uint64_t generation = 0, collect = 0;
  std::optional<RpcClient> client;
  std::string connected_to;
  auto drop = [&] {
    MutexLock l(&sync_socket_mu_);
    sync_socket_ = nullptr;
    client.reset();
  };
  while (!Stopping()) {
    std::optional<SyncJob> job = CurrentSyncJob();
    if (!job) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    auto to = CoordinatorEndpoint(job->config);
    if (!to) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    if (client && connected_to != to->ToString()) drop();
    if (!client) {
      auto c =
          RpcClient::Connect(*to, config_.secret, "node " + std::to_string(job->config.node_rank));
      if (!c.ok()) {
        Log()->debug("sync call: {}", c.status().message());
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      MutexLock l(&sync_socket_mu_);
      client = std::move(*c);
      connected_to = to->ToString();
      sync_socket_ = &client->socket();
      if (Stopping()) client->socket().Shutdown();  // ~Agent came first
    }
    wire::SyncRequest req;
    req.job = job->config.job_name;
    req.node = job->config.node_rank;
    req.step = node_step_.load();
    req.rate = node_rate_.load();
    req.generation = generation;
    req.collect = collect;
    req.wait = std::chrono::milliseconds(kWait);
    auto r = client->Call(req.ToJson(), kWait + std::chrono::seconds(5));
    if (!r.ok()) {
      Log()->debug("sync call: {}", r.status().message());
      drop();
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    StatusOr<wire::SyncDecision> decision = wire::SyncDecision::FromJson(*r);
    if (!decision.ok()) {
      Log()->warn("reply to a sync call: {}", decision.status().message());
      continue;
    }
    collect = decision->collect;  // the next call reports to it
    generation = decision->generation;
    if (decision->step) {
      if (decision->round == job->round) {
        ApplySync(*decision);
      } else {  // decided for a round this node is joining: ask again once registered
        generation = 0;
        std::this_thread::sleep_for(kSlotPoll);
      }
    }
  }
  drop();
}

// Publishes a decided on-demand step in the sync map. Withdrawals are local
// (a new incarnation, or every rank served it), never the coordinator's: a
// rank here may not have reached the step when another node's restarted
// ranks begin the next round.
void Agent::ApplySync(const wire::SyncDecision& decision) {
  if (!decision.step) return;
  const int64_t step = *decision.step;
  const uint64_t generation = decision.generation;
  MutexLock l(&mu_);
  if (generation == published_generation_) return;  // this decision was taken in already
  published_generation_ = generation;
  if (step == published_sync_) return;
  sync_pids_.clear();
  for (auto [i, pid] : LiveRanks()) sync_pids_.push_back(pid);
  published_sync_ = step;
  ondemand_step_ = step;
  ondemand_since_ = Clock::now();
  sync_map_.Publish(step, decision.notice_unix_ms);
  Log()->info("on-demand step {} published to {} rank(s) here (notice from {})", step,
              sync_pids_.size(), decision.origin.empty() ? "?" : decision.origin);
}

void Agent::WithdrawSync(const char* why) {
  if (published_sync_ == kNoSyncStep) return;
  Log()->info("on-demand step {} withdrawn: {}", published_sync_, why);
  published_sync_ = kNoSyncStep;
  sync_pids_.clear();
  sync_map_.Publish(kNoSyncStep, 0);
}

// The on-demand step this node saved is on every peer.
bool Agent::SyncStepReplicated() const {
  if (ondemand_step_ == kNoSyncStep || !inc_) return true;
  return inc_->peers.empty() || replication_->Replicated(ondemand_step_);
}

void Agent::AwaitOnDemandReplicated(const std::string& job) {
  constexpr auto kLimit = std::chrono::seconds(30);
  const auto deadline = Clock::now() + kLimit;
  MutexLock l(&mu_);
  if (!inc_ || inc_->config.job_name != job || SyncStepReplicated()) return;
  Log()->info("the job restarted: replicating on-demand step {} first", ondemand_step_);
  while (!SyncStepReplicated() && !Stopping() && Clock::now() < deadline) {
    cv_.WaitFor(&mu_, kSlotPoll);
  }
  if (!SyncStepReplicated()) {
    Log()->warn("on-demand step {} not on every peer after {} s; the restart goes ahead",
                ondemand_step_, kLimit.count());
  }
}

Clock::time_point Agent::BeginDrain() {
  auto ranks = LiveRanks();
  Log()->warn("SIGTERM: draining for at most {} s ({} rank(s) here); a second signal stops now",
              config_.grace.count(), ranks.size());
  if (!ranks.empty()) PostNotice("SIGTERM to the agent");
  return Clock::now() + config_.grace;
}

// One look at a drain; true when it is over.
bool Agent::DrainStep(Clock::time_point deadline) {
  if (Clock::now() >= deadline) return true;
  MutexLock l(&mu_);
  bool ranks_gone = true;
  for (int i = 0; i < kSyncSlots; ++i) {
    int64_t pid = sync_map_.slot(i).pid.load();
    if (pid != 0 && ProcessAlive(pid)) ranks_gone = false;
  }
  const bool heard = notice_unsent_.empty() || !sync_job_;  // no job: no one to tell
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
  const auto start = Clock::now(), deadline = start + grace;
  auto ranks = LiveRanks();
  Log()->warn("maintenance event: SIGTERM to {} rank(s) using {}, grace {} ms{}", ranks.size(),
              config_.local_dir, grace.count(), lose_ram ? ", the node loses its RAM" : "");
  wire::MaintenanceEvent event;
  event.time = Rfc3339(started_ms);
  event.unix_ms = started_ms;
  event.origin = request.origin;
  event.grace_ms = grace.count();
  event.lose_ram = lose_ram;
  event.ranks = static_cast<int>(ranks.size());
  PostNotice("strata maintenance");
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
  event.seconds = SecondsSince(start);
  RecordMaintenance(event);
  return event.ToJson();
}

void Agent::StopRanks(const std::vector<std::pair<int, int64_t>>& ranks, Clock::time_point deadline,
                      wire::MaintenanceEvent& event) {
  const auto start = Clock::now();
  for (auto [i, pid] : ranks) ::kill(static_cast<pid_t>(pid), SIGTERM);
  // A rank may release its slot well before its process is gone (a
  // framework's teardown): wait for the process.
  PollUntil(deadline, [&] {
    return std::none_of(ranks.begin(), ranks.end(),
                        [](const auto& r) { return ProcessAlive(r.second); });
  });
  event.ranks_exited_seconds = SecondsSince(start);
  int killed = 0;
  for (auto [i, pid] : ranks) {
    if (ProcessAlive(pid) && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
  }
  event.ranks_killed = killed;
}

// The ranks' on-demand step, once the main loop has taken it in.
void Agent::AwaitOnDemandStep(bool on_peers, Clock::time_point deadline,
                              wire::MaintenanceEvent& event) {
  int64_t sync = kNoSyncStep;
  bool saved = false, replicated = false;
  PollUntil(deadline, [&] {
    MutexLock l(&mu_);
    sync = ondemand_step_;
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
  std::optional<SyncJob> job = CurrentSyncJob();
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
  MutexLock l(&mu_);
  ondemand_step_ = kNoSyncStep;
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
