// Copyright 2026 The Strata Authors.
#include "agent/node/restore.h"

#include <mutex>
#include <random>

#include "agent/metrics/agent_metrics.h"
#include "agent/plan/planner.h"
#include "agent/rpc/step_stream.h"
#include "agent/rpc/transfer.h"
#include "format/naming.h"
#include "storage/retry.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

// A random id for one start of the client (one registration, retried).
std::string IncarnationId() {
  static std::mt19937_64 gen{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  return Hex64(gen());
}

}  // namespace

// One Run's working state: what it registered with, the round and plan it
// works on, and what this node's data came to.
struct Restore::Attempt {
  // Logs a retried operation's failures without a line per try: the first
  // failure, then the latest every minute, and the success that ends them.
  // Nested here, not in an anonymous namespace: a unity build compiles this
  // file inside another, where a member of such a type is an error (GCC's
  // -Wsubobject-linkage).
  class RetryLog {
   public:
    RetryLog(std::string what, SteadyClock* clock) : what_(std::move(what)), clock_(clock) {}
    void Failed(const Status& s) {
      ++failures_;
      const auto now = clock_->Now();
      if (failures_ > 1 && now - logged_ < std::chrono::minutes(1)) return;
      logged_ = now;
      Log()->warn("{}: {} (try {}; retrying with backoff)", what_, s.message(), failures_);
    }
    void Succeeded() {
      if (failures_ > 0) Log()->info("{}: done after {} failed tries", what_, failures_);
      failures_ = 0;
    }

   private:
    const std::string what_;
    SteadyClock* const clock_;
    int failures_ = 0;
    SteadyClock::time_point logged_{};
  };

  Attempt(const Request& r, SteadyClock* clock)
      : request(r), register_log("registering with the coordinator", clock) {}

  const Request& request;
  const ReplicatorConfig& job() const { return request.config; }
  wire::RegisterRequest registration;
  int64_t round = 0;
  bool yaml_taken = false;  // removed: a yaml seen now is a new one
  int failures = 0;         // for the backoff
  RetryLog register_log;
  // The plan being worked on, and this node's part of it.
  wire::PlanReply plan;
  std::map<int, std::string> addresses;  // every address any plan gave
  Status got;                            // this node's data, verified
  std::string fetched;                   // where it came from, if not this node,
  wire::StepKey fetched_key;             // for this copy
  std::vector<wire::FailedHolder> bad;   // holders whose copy failed
  // What this node held above the plan's step when it first reported ready
  // for this plan: what "go" removes. A copy or shard that came after is a
  // save of a node that went on first, the job's new history.
  std::optional<HeldAbove> held_above;
  Status failure;  // for kFailed
};

std::string_view Restore::StateName(State state) {
  switch (state) {
    case State::kIdle:
      return "idle";
    case State::kRegister:
      return "registering";
    case State::kAwaitPlan:
      return "awaiting plan";
    case State::kGetData:
      return "getting data";
    case State::kReady:
      return "ready, awaiting go";
    case State::kDone:
      return "done";
    case State::kFailed:
      return "failed";
    case State::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

Restore::Restore(Env* env, SteadyClock* clock, Store* store, const LocalDir* local,
                 NodeBackup* backup, Options options, Hooks hooks)
    : env_(env),
      clock_(clock),
      store_(store),
      local_(local),
      backup_(backup),
      options_(std::move(options)),
      hooks_(std::move(hooks)) {}

Restore::Summary Restore::summary() const {
  MutexLock l(&mu_);
  return summary_;
}

void Restore::NoteQuarantined(const std::string& job, int64_t step) {
  MutexLock l(&mu_);
  quarantined_[job].insert(step);
}

std::set<int64_t> Restore::Quarantined(const std::string& job) const {
  MutexLock l(&mu_);
  auto it = quarantined_.find(job);
  return it == quarantined_.end() ? std::set<int64_t>{} : it->second;
}

void Restore::Enter(State state, int64_t round) {
  MutexLock l(&mu_);
  summary_.state = state;
  summary_.round = round;
}

StatusOr<Restore::Outcome> Restore::Run(const Request& request) {
  // Active from the inventory on: a maintenance event that wipes the RAM
  // waits for the restore instead of pulling the store from under it.
  {
    MutexLock l(&mu_);
    client_ended_.reset();  // a notice of an earlier client is not this one's
    active_ = true;
  }
  Attempt a(request, clock_);
  const ReplicatorConfig& c = request.config;
  a.registration.job = c.job_name;
  a.registration.node = c.node_rank;
  a.registration.nodes = c.nodes;
  a.registration.dp = c.assume_data_parallelism.value_or(1);
  a.registration.address = options_.address;
  a.registration.inventory = Inventory(c.job_name);
  a.registration.cadence = request.cadence;
  a.registration.redundancy = request.redundancy;
  a.registration.domain = options_.domain;
  if (options_.coded != nullptr) a.registration.parity = options_.coded->Inventory(c.job_name);
  a.registration.quarantined = Quarantined(c.job_name);
  // Retries of this registration carry the same id: the coordinator keeps
  // the round for them (Coordinator::Register).
  a.registration.incarnation = IncarnationId();
  State state = State::kRegister;
  for (;;) {
    Enter(state, a.round);
    if (state == State::kDone || state == State::kFailed) break;
    if (hooks_.stopping()) {
      a.failure = CancelledError("stopped while restoring (" + std::string(StateName(state)) + ")");
      break;
    }
    if (a.yaml_taken && Superseded()) {
      a.failure = CancelledError("a new replicator.yaml replaces this incarnation");
      break;
    }
    std::optional<std::string> gone = a.yaml_taken ? ClientGone() : std::nullopt;
    if (gone) {
      a.failure =
          CancelledError("the client of this incarnation ended (" + *gone + "): no restore for it");
      break;
    }
    switch (state) {
      case State::kRegister:
        state = Register(a);
        break;
      case State::kAwaitPlan:
        state = AwaitPlan(a);
        break;
      case State::kGetData:
        state = GetData(a);
        break;
      case State::kReady:
        state = Ready(a);
        break;
      default:
        a.failure = InternalError("restore in state " + std::string(StateName(state)));
        state = State::kFailed;
    }
  }
  {
    MutexLock l(&mu_);
    active_ = false;
  }
  if (state != State::kDone) {
    Enter(a.failure.code() == StatusCode::kCancelled ? State::kCancelled : State::kFailed, a.round);
    return a.failure;
  }
  return Outcome{a.round, std::move(a.addresses), a.plan.group};
}

Restore::State Restore::Retry(Attempt& a, const Status& why) {
  Log()->warn("job {} round {}: {}; registering again", a.job().job_name, a.round, why.message());
  BackOff(++a.failures);
  return State::kRegister;
}

void Restore::BackOff(int failures) {
  // Jittered, 0.2 s doubling to 5 s.
  const auto until = clock_->Now() + storage::BackoffDelay(failures, std::chrono::milliseconds(200),
                                                           std::chrono::milliseconds(5000));
  PollUntil(
      *clock_, until, [] { return false; }, hooks_.stopping);
}

// After this start's yaml was removed, a yaml in the directory is a new
// one: the client started again.
bool Restore::Superseded() const { return env_->Exists(options_.yaml_path); }

// The yaml is set aside (a rename: atomic) and looked at there, so a yaml
// a restarted client writes at any moment is never removed unseen: one
// written before the rename is put back, one written after it is not
// touched. Either supersedes this start at its next state.
Status Restore::RemoveTakenYaml(const std::optional<FileIdentity>& taken) {
  const std::string& path = options_.yaml_path;
  if (!taken) return env_->RemoveFile(path);
  const std::string aside = JoinPath(Dirname(path), std::string(kReplicatorYamlTaken));
  STRATA_RETURN_IF_ERROR(env_->Rename(path, aside));
  StatusOr<FileIdentity> now = env_->Identify(aside);
  if (!now.ok()) {
    Log()->warn("{}: cannot tell whether it is the yaml this start read ({}); removing it", aside,
                now.status().message());
  }
  // Not the change time: the rename just moved it.
  const bool same = now.ok() && now->device == taken->device && now->inode == taken->inode &&
                    now->size == taken->size && now->mtime_ns == taken->mtime_ns;
  if (!now.ok() || same) return env_->RemoveFile(aside);
  Log()->info("{}: a new one was written since this start read it; it stays", path);
  return env_->Rename(aside, path);
}

void Restore::ClientEnded(std::string why) {
  MutexLock l(&mu_);
  if (active_) client_ended_ = std::move(why);
}

std::optional<std::string> Restore::ClientGone() const {
  MutexLock l(&mu_);
  return client_ended_;
}

Restore::State Restore::Register(Attempt& a) {
  auto registered = hooks_.call_coordinator(a.job(), a.registration.ToJson(), kCallTimeout);
  const StatusCode code = registered.status().code();
  if (code == StatusCode::kFailedPrecondition || code == StatusCode::kInvalidArgument) {
    // No retry mends it (no coordinator configured, a registration the
    // coordinator refuses): the client hears it now, before the yaml goes.
    a.failure = registered.status();
    return State::kFailed;
  }
  if (!registered.ok()) {
    a.register_log.Failed(registered.status());
    BackOff(++a.failures);
    return State::kRegister;
  }
  a.register_log.Succeeded();
  StatusOr<wire::RegisterReply> reply = wire::RegisterReply::FromJson(*registered);
  if (!reply.ok()) {
    a.failure = reply.status();
    return State::kFailed;
  }
  a.round = reply->round;
  if (hooks_.on_round) hooks_.on_round(a.job(), a.round);
  if (!a.yaml_taken) {  // only now: clients look for markers once it is gone
    Status s = RemoveTakenYaml(a.request.yaml);
    if (!s.ok()) {
      a.failure = s;
      return State::kFailed;
    }
    a.yaml_taken = true;
  }
  a.plan = wire::PlanReply{};  // the new round's plans start at version 1
  return State::kAwaitPlan;
}

// Waits for the next version of the round's plan: as this node needs it,
// its own source and the addresses of its holders and peers (O(1) in the
// job's size).
Restore::State Restore::AwaitPlan(Attempt& a) {
  const ReplicatorConfig& c = a.job();
  wire::AwaitPlanRequest wait;
  wait.job = c.job_name;
  wait.round = a.round;
  wait.plan_version = a.plan.plan_version;
  wait.node = c.node_rank;
  wait.peers = a.request.peers;
  auto reply = hooks_.call_coordinator(c, wait.ToJson(), kCallTimeout);
  if (!reply.ok() && reply.status().code() == StatusCode::kDeadlineExceeded) {
    return State::kAwaitPlan;  // not all nodes are here yet
  }
  if (!reply.ok()) return Retry(a, reply.status());
  StatusOr<wire::PlanReply> plan = wire::PlanReply::FromJson(*reply);
  if (!plan.ok()) return Retry(a, plan.status());
  a.plan = std::move(*plan);
  for (int64_t step : a.plan.quarantined) NoteQuarantined(c.job_name, step);
  for (const auto& [n, address] : a.plan.addresses) a.addresses[n] = address;
  Log()->info("job {} round {} plan {}: {}", c.job_name, a.round, a.plan.plan_version,
              a.plan.reason);
  if (!a.plan.error.empty()) {
    a.failure = FailedPreconditionError(a.plan.error);
    return State::kFailed;
  }
  return State::kGetData;
}

// This node's part of the plan: its own copy read and verified, or the copy
// fetched from the first holder that serves one that verifies. The outcome
// (and the holders that failed) goes into the ready report, never straight
// to an error: the coordinator plans again without a failed holder.
Restore::State Restore::GetData(Attempt& a) {
  const ReplicatorConfig& c = a.job();
  const wire::PlanReply& plan = a.plan;
  a.got = Status::Ok();
  a.bad.clear();
  a.held_above.reset();
  if (!plan.step) {  // a fresh start
    Status s = local_->WritePrerestore(std::nullopt);
    return s.ok() ? State::kReady : Retry(a, s);
  }
  const int64_t step = *plan.step;
  if (plan.discard_above) DiscardAbove(c.job_name, *plan.discard_above, "rollback to step");
  auto own = plan.sources.find(c.node_rank);
  if (own == plan.sources.end()) {
    return Retry(a, InvalidArgumentError("the plan for step " + std::to_string(step) +
                                         " has no source for node " + std::to_string(c.node_rank)));
  }
  const wire::Source& source = own->second;
  const wire::StepKey key{c.job_name, source.source_rank, step};
  const bool have = store_->Has(key);
  // replicator.prerestore names the backup when this node's data comes
  // from it: planned so, or after the peers that should have served failed.
  const bool from_backup =
      !have && source.holders.size() == 1 && source.holders[0] == wire::kBackupHolder;
  Status s = local_->WritePrerestore(step, from_backup ? plan.backup : "");
  if (!s.ok()) return Retry(a, s);
  int used = c.node_rank;
  if (have) {
    a.got = VerifyOwnCopy(key, c.node_rank, &a.bad);
  } else {
    MakeRoom(c.job_name, step);
    a.got = source.decode ? DecodeStep(a, key, source) : FetchStep(a, key, source, &used);
  }
  if (a.got.ok() && used == wire::kBackupHolder && !from_backup) {
    s = local_->WritePrerestore(step, plan.backup);
    if (!s.ok()) return Retry(a, s);
  }
  return State::kReady;
}

// Reports this node's part; every node ready means "go": the markers are
// written and the restore is done. A failed node means a new plan.
Restore::State Restore::Ready(Attempt& a) {
  const ReplicatorConfig& c = a.job();
  wire::ReadyRequest ready;
  ready.job = c.job_name;
  ready.round = a.round;
  ready.node = c.node_rank;
  ready.plan_version = a.plan.plan_version;
  ready.ok = a.got.ok();
  ready.bad = a.bad;
  // Listed before the first report of this plan: no node goes on, and so
  // no new save comes, until every node reported. Not again when a report
  // is sent again (its answer timed out): the others may have gone on.
  if (!a.held_above) {
    if (hooks_.before_listing) hooks_.before_listing();
    if (a.plan.step) a.held_above = ListAbove(c.job_name, *a.plan.step);
  }
  auto r = hooks_.call_coordinator(c, ready.ToJson(), kCallTimeout);
  // Run cancels it: no markers for a moot restore.
  if (Superseded() || ClientGone()) return State::kReady;
  if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded) return State::kReady;
  if (!r.ok()) return Retry(a, r.status());
  StatusOr<wire::ReadyReply> answer = wire::ReadyReply::FromJson(*r);
  if (!answer.ok()) return Retry(a, answer.status());
  if (!answer->go) return State::kAwaitPlan;  // replan: wait for the next version
  if (answer->sync && hooks_.on_sync) hooks_.on_sync(*answer->sync);
  Status s = hooks_.on_go ? hooks_.on_go() : Status::Ok();
  if (!s.ok()) return Retry(a, s);
  if (a.plan.step) {
    DiscardAbove(c.job_name, *a.plan.step, "the job goes on from step",
                 a.held_above ? &*a.held_above : nullptr);
  }
  s = WriteMarkers(a);
  return s.ok() ? State::kDone : Retry(a, s);
}

std::vector<wire::HeldCopy> Restore::Inventory(const std::string& job) {
  std::vector<wire::HeldCopy> inv;
  int proven = 0, read = 0;
  for (const auto& [key, index] : store_->List()) {
    if (key.job != job) continue;
    StatusOr<bool> checked = store_->CheckHeld(key);
    if (!checked.ok()) {
      Log()->warn("dropping corrupt copy {}: {}", key.ToString(), checked.status().message());
      store_->Remove(key).IgnoreError();
      continue;
    }
    ++(*checked ? read : proven);
    inv.push_back({key.rank, key.step, index.digest});
  }
  if (proven + read > 0) {
    Log()->info("job {}: {} held copies proven unchanged by their seals, {} read and verified", job,
                proven, read);
  }
  return inv;
}

// The restore metrics of `key`, got from `tier` in the time since `began`.
void Restore::RecordRestore(const char* tier, const wire::StepKey& key,
                            SteadyClock::time_point began) {
  metric::RestoreSeconds(tier).Observe(SecondsSince(*clock_, began));
  if (auto index = store_->GetIndex(key); index.ok()) {
    metric::RestoreBytes(tier).Add(static_cast<double>(index->total_bytes));
  }
}

// Reads and verifies this node's own copy of `key` before the ranks restore
// from it (registration proved it unchanged without reading it). A copy that
// fails is dropped and reported in `bad`, so that the coordinator plans
// another source. `node` is this node's rank.
Status Restore::VerifyOwnCopy(const wire::StepKey& key, int node,
                              std::vector<wire::FailedHolder>* bad) {
  const SteadyClock::time_point began = clock_->Now();
  Status v = store_->Verify(key);
  if (v.ok()) {
    RecordRestore("own", key, began);
    return v;
  }
  Log()->warn("own copy {} does not verify, dropped: {}", key.ToString(), v.message());
  metric::VerificationFailures("own").Add();
  store_->Remove(key).IgnoreError();
  bad->push_back({node, key.rank, key.step});
  return v;
}

// Fetches `key` from the first holder in `source` (the plan's entry for
// this node) that serves a copy that verifies: peers first, the backup tier
// last. Records the holders that failed in the attempt and the one used in
// *used.
Status Restore::FetchStep(Attempt& a, const wire::StepKey& key, const wire::Source& source,
                          int* used) {
  const wire::PlanReply& plan = a.plan;
  const int node = a.job().node_rank;
  Status last = NotFoundError("no holder of " + key.ToString());
  for (int holder : source.holders) {
    if (holder == node) continue;
    std::string from = "node " + std::to_string(holder);
    const char* tier = holder == wire::kBackupHolder ? "backup" : "peer";
    const SteadyClock::time_point began = clock_->Now();
    Status s;
    if (holder == wire::kBackupHolder) {
      from = "backup " + plan.backup;
      s = backup_ == nullptr
              ? FailedPreconditionError("the plan restores " + key.ToString() + " from backup " +
                                        plan.backup + " but this agent has no --backup")
              : backup_->FetchPart(plan.backup, key, source.digest);
    } else {
      auto address = plan.addresses.find(holder);
      s = address == plan.addresses.end()
              ? UnavailableError("no address for node " + std::to_string(holder))
              : FetchFrom(address->second, key, node, source.digest);
    }
    if (s.ok()) {
      a.fetched = "step " + std::to_string(key.step) + " of node " + std::to_string(key.rank) +
                  " from " + from;
      a.fetched_key = key;
      Log()->info("restored {} from {}", key.ToString(), from);
      RecordRestore(tier, key, began);
      *used = holder;
      return s;
    }
    if (s.code() == StatusCode::kDataLoss) metric::VerificationFailures(tier).Add();
    Log()->warn("fetching {} from {}: {}", key.ToString(), from, s.message());
    a.bad.push_back({holder, key.rank, key.step});
    last = s;
  }
  return last;
}

// Fetches `key` (the copy with `digest`, when the plan gives one) from the
// agent at `address` into the store, over up to `data_streams`
// connections, verified as it arrives before it counts as held.
Status Restore::FetchFrom(const std::string& address, const wire::StepKey& key, int node_rank,
                          std::optional<uint64_t> digest) {
  STRATA_ASSIGN_OR_RETURN(Endpoint to, ParseEndpoint(address));
  STRATA_ASSIGN_OR_RETURN(FetchedCopy copy,
                          FetchCopy(to, options_.trust, "node " + std::to_string(node_rank), key,
                                    options_.data_streams, store_, digest));
  return AdoptCopy(store_, key, copy);
}

// Rebuilds `key` from the shards of its coded group the plan names; the
// holders of shards that failed go into the ready report.
Status Restore::DecodeStep(Attempt& a, const wire::StepKey& key, const wire::Source& source) {
  const int node = a.job().node_rank;
  if (options_.coded == nullptr) {
    return FailedPreconditionError("the plan decodes " + key.ToString() +
                                   " but this agent has no coded tier");
  }
  const SteadyClock::time_point began = clock_->Now();
  Status s = options_.coded->Decode(key, source.digest, *source.decode, a.plan.addresses,
                                    "node " + std::to_string(node), &a.bad);
  if (!s.ok()) {
    if (s.code() == StatusCode::kDataLoss) metric::VerificationFailures("peer").Add();
    Log()->warn("{}", s.message());
    return s;
  }
  a.fetched = "step " + std::to_string(key.step) + " of node " + std::to_string(key.rank) +
              " decoded from group " + source.decode->group.ToString();
  a.fetched_key = key;
  Log()->info("restored {}: decoded from group {}", key.ToString(),
              source.decode->group.ToString());
  RecordRestore("peer", key, began);
  return s;
}

Status Restore::WriteMarkers(const Attempt& a) {
  const ReplicatorConfig& c = a.job();
  const wire::PlanReply& plan = a.plan;
  if (!plan.step) {
    {
      MutexLock l(&mu_);
      summary_.last = "nothing to restore (fresh start)";
      summary_.step = -1;
    }
    return local_->WriteMarkers(c.job_name, c.node_rank, c.workers_per_node, 0, {});
  }
  const int64_t step = *plan.step;
  auto own = plan.sources.find(c.node_rank);
  if (own == plan.sources.end()) {
    return InvalidArgumentError("the plan has no source for node " + std::to_string(c.node_rank));
  }
  const int src = own->second.source_rank;
  {
    MutexLock l(&mu_);
    summary_.step = step;
    summary_.last =
        a.fetched.empty() ? "step " + std::to_string(step) + " from own store" : a.fetched;
  }
  // Every worker restores the step; PyTorch workers each from their own file.
  const std::string target = store_->RelativeStepPath({c.job_name, src, step});
  std::vector<std::string> targets;
  for (int w = 0; w < c.workers_per_node; ++w) {
    targets.push_back(c.framework != Framework::kPytorch
                          ? target
                          : target + "/" + SaveFileName({c.job_name, step, src, w}));
  }
  return local_->WriteMarkers(c.job_name, c.node_rank, c.workers_per_node, step, targets);
}

// Every node goes on from the plan's step: the steps above it that nodes
// hold, in the store or in parity, are a history the job left (a rollback's,
// or the saves a restart lost the race for). They must not be restored or
// replicated again, and left in place they would pass for the newest steps:
// collection keeps the newest above the floor, so a node kept its stale
// saves and dropped each new one before its group coded it (the eight-node
// soak, seed 1000: the job never replicated again and fell back, backup
// after backup). So they go at "go", before the markers: what the node
// held when it reported ready, not a new save a node that handled its "go"
// sooner already sent (that save would lack this node's copy or shard).
Restore::HeldAbove Restore::ListAbove(const std::string& job, int64_t step) const {
  HeldAbove held;
  for (const auto& [key, index] : store_->List()) {
    if (key.job == job && key.step > step) held.steps.emplace(key, index.digest);
  }
  if (options_.coded != nullptr) held.parity = options_.coded->ListAbove(job, step);
  return held;
}

void Restore::DiscardAbove(const std::string& job, int64_t step, std::string_view why,
                           const HeldAbove* only) {
  const HeldAbove held = only != nullptr ? *only : ListAbove(job, step);
  std::vector<std::string> removed;
  for (const auto& [key, digest] : held.steps) {
    Status s = store_->Remove(key, digest);
    if (s.code() == StatusCode::kFailedPrecondition) continue;  // another copy since
    if (s.ok()) {
      removed.push_back(key.ToString());
    } else {
      Log()->warn("removing {} (above step {}): {}", key.ToString(), step, s.message());
    }
  }
  if (options_.coded != nullptr) {
    if (int n = options_.coded->DiscardListed(held.parity); n > 0) {
      removed.push_back(std::to_string(n) + " parity shard(s)");
    }
  }
  if (removed.empty()) return;
  Log()->info("{} {}: removed what this node held above it ({} ... {})", why, step, removed.front(),
              removed.back());
}

// Before the fetch the steps above the plan's are still a history the job
// may return to (this round may fail, and a later one restore a newer
// step), so they stay, unless they fill the RAM disk: then every fetch fails
// for want of room and each failure sends the plan to an older step. The
// eight-node soak (rs(6,2), seed 1000) lost 37,818 steps so: a node whose
// disk had filled with saves its group never coded could not fetch a
// backup's part, and the plan walked back through 23 backups. On a disk
// options_.make_room_fill full they go before the fetch.
void Restore::MakeRoom(const std::string& job, int64_t step) {
  const double fill = FillOf(store_->root()).value_or(1.0);  // unknown: short
  if (fill < options_.make_room_fill) return;
  DiscardAbove(
      job, step,
      fmt::format("restoring into a RAM disk {:.0f}% full: the fetch of step", fill * 100));
}

}  // namespace strata::agent
