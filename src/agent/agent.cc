// Copyright 2026 The Strata Authors.
//
// The agent's main loop: the client file protocol, the incarnation (restore)
// flow and ingestion. Replication and serving live in agent_replication.cc
// and agent_server.cc.
#include "agent/agent.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>

#include "agent/local_dir.h"
#include "agent/planner.h"
#include "agent/ram_disk.h"
#include "agent/watcher.h"
#include "format/naming.h"
#include "storage/retry.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "wire/op.h"

namespace strata::agent {
namespace {

constexpr auto kCallTimeout = std::chrono::seconds(30);
constexpr uint64_t kMaxYamlBytes = 1 << 20;

// A random id for one start of the client (one registration, retried).
std::string IncarnationId() {
  static std::mt19937_64 gen{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  return Hex64(gen());
}

// Logs a retried operation's failures without a line per try: the first
// failure, then the latest every minute, and the success that ends them.
class RetryLog {
 public:
  explicit RetryLog(std::string what) : what_(std::move(what)) {}
  void Failed(const Status& s) {
    ++failures_;
    const auto now = std::chrono::steady_clock::now();
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
  int failures_ = 0;
  std::chrono::steady_clock::time_point logged_{};
};

// True if none of `files` in `dir` was modified in the last second. PyTorch
// clients write .save files in place, so a file is only taken once settled.
bool AllSettled(Env* env, const std::string& dir, const std::vector<std::string>& files) {
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (const auto& f : files) {
    StatusOr<FileIdentity> id = env->Identify(JoinPath(dir, f));
    if (!id.ok() || now_ns - id->mtime_ns < 1'000'000'000) return false;
  }
  return true;
}

std::string YamlPath(const AgentConfig& c) {
  return JoinPath(c.local_dir, std::string(kReplicatorYaml));
}

}  // namespace

Agent::Agent(AgentConfig config, Env* env, SteadyClock* clock)
    : config_(std::move(config)),
      env_(env),
      clock_(clock),
      local_(env, config_.local_dir),
      pool_(ThreadPool::DefaultThreads() - 1) {}

StatusOr<std::unique_ptr<Agent>> Agent::Start(AgentConfig config, Env* env, SteadyClock* clock) {
  std::unique_ptr<Agent> a(new Agent(std::move(config), env, clock));
  STRATA_RETURN_IF_ERROR(env->CreateDir(a->config_.local_dir));
  STRATA_ASSIGN_OR_RETURN(a->store_, Store::Open(a->config_.local_dir, &a->pool_, env));
  a->ram_disk_ = DescribeRamDisk(a->config_.local_dir);
  a->LogRamDisk();
  STRATA_ASSIGN_OR_RETURN(
      a->listener_, net::Socket::Listen(a->config_.listen.host, a->config_.listen.port, SOMAXCONN));
  STRATA_ASSIGN_OR_RETURN(uint16_t port, a->listener_.LocalPort());
  // Advertise the configured port, or the bound one when listening on port 0.
  uint16_t advertised = a->config_.listen.port == 0 ? port : a->config_.advertise.port;
  a->listen_ = Endpoint{a->config_.advertise.host, advertised};
  STRATA_RETURN_IF_ERROR(a->OpenBackup());
  STRATA_RETURN_IF_ERROR(a->OpenOnDemandSync());
  a->OpenReplication();
  a->LoadState();
  a->ResumeReplication();
  STRATA_RETURN_IF_ERROR(a->StartServer());
  a->replication_->Start();
  if (a->backup_) a->backup_->Start();
  a->sync_->Start();
  Log()->info("agent for {} listening on {} ({} held)", a->config_.local_dir, a->listen_.ToString(),
              a->store_->List().size());
  return a;
}

void Agent::LogRamDisk() const {
  const std::string& dir = config_.local_dir;
  if (!ram_disk_.tmpfs) {
    Log()->warn("{} is not on a tmpfs: steps are written to a disk, not kept in RAM", dir);
  } else if (!ram_disk_.HugePages()) {
    Log()->info(
        "{} is a tmpfs with 4 KiB pages (huge={}): mounted with huge=within_size it receives, "
        "verifies and restores steps faster (docs/agent.md, \"The RAM disk\")",
        dir, ram_disk_.huge.empty() ? "unknown" : ram_disk_.huge);
  } else {
    Log()->info("{} is a tmpfs with huge pages (huge={})", dir, ram_disk_.huge);
  }
}

// After a restart, the newest own step may have been ingested by the previous
// process but not yet replicated: queue it (a peer that already holds it
// answers "have", so this costs one call when nothing was lost).
void Agent::ResumeReplication() {
  MutexLock l(&mu_);
  if (!inc_) return;
  std::optional<StepKey> newest;
  for (const auto& [key, index] : store_->List()) {
    if (key.job == inc_->config.job_name && key.rank == inc_->config.node_rank) newest = key;
  }
  if (newest) replication_->Enqueue(*newest);
}

Agent::~Agent() {
  stopping_ = true;
  coordinator_.Shutdown();       // answers the calls parked in it
  if (server_) server_->Stop();  // long calls see Stopping() and return
  if (replication_) replication_->Stop();
  if (backup_) backup_->Stop();
  if (sync_) sync_->Stop();
}

Status Agent::Run(const std::atomic<bool>& stop, const std::atomic<bool>* drain) {
  stop_flag_ = &stop;
  drain_flag_ = drain;
  Status s = RunLoop(stop);
  stopping_ = true;  // on every path: nothing may read `stop` after Run returns
  return s;
}

Status Agent::RunLoop(const std::atomic<bool>& stop) {
  STRATA_ASSIGN_OR_RETURN(DirWatcher watcher, DirWatcher::Open(config_.local_dir));
  if (watcher.polling()) {
    Log()->warn("no inotify for {} ({}): rescanning it every second instead", config_.local_dir,
                watcher.reason());
  }
  // A yaml written while we were down; without inotify it may still be
  // being written (in place): the rescans decide.
  OnEvents(!watcher.polling() && env_->Exists(YamlPath(config_)));
  auto last_scan = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> drain_until;
  while (!stop.load()) {
    const std::atomic<bool>* drain = drain_flag_.load();
    if (drain != nullptr && drain->load()) {  // SIGTERM: the node is going away
      if (!drain_until) drain_until = BeginDrain();
      if (DrainStep(*drain_until)) break;
    }
    STRATA_ASSIGN_OR_RETURN(auto events, watcher.Wait(std::chrono::milliseconds(200)));
    bool yaml = false, rescan = false;
    for (const auto& e : events) {
      yaml |= e.name == kReplicatorYaml && (e.closed_write || e.moved_in);
      rescan |= e.overflow || e.moved_in || e.created || e.closed_write;
    }
    // Rescan at least every second: inotify can overflow, and PyTorch
    // clients' .save files arrive as plain writes.
    if (rescan || yaml || std::chrono::steady_clock::now() - last_scan > std::chrono::seconds(1)) {
      last_scan = std::chrono::steady_clock::now();
      if (watcher.polling()) yaml = PolledYamlSettled();
      OnEvents(yaml);
    }
  }
  return Status::Ok();
}

// Without inotify no close tells that a client finished writing the yaml
// (the NeMo plugin writes it in place): it counts as complete once two
// rescans a second apart find it non-empty and unchanged.
bool Agent::PolledYamlSettled() {
  struct stat st;
  std::string seen;
  if (::stat(YamlPath(config_).c_str(), &st) == 0 && st.st_size > 0) {
    seen = std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  }
  bool settled = !seen.empty() && seen == polled_yaml_ && seen != taken_yaml_;
  polled_yaml_ = seen;
  if (settled) taken_yaml_ = seen;  // reported once, as inotify reports a close once
  return settled;
}

void Agent::OnEvents(bool yaml_complete) {
  {
    // A maintenance event holds the node: a restarted client's new yaml
    // waits until it is over (and, with --lose-ram, the RAM is wiped).
    MutexLock l(&mu_);
    yaml_deferred_ |= yaml_complete;
    yaml_complete = yaml_deferred_ && !maintenance_since_;
    if (yaml_complete) yaml_deferred_ = false;
  }
  KeepJaxInitInfo();  // before the yaml: Orbax reads it first
  if (yaml_complete) OnReplicatorYaml();
  IngestPytorchSaves();  // gathers .save files into step directories
  IngestCommittedSteps();
}

void Agent::KeepJaxInitInfo() {
  if (!config_.node_rank) return;
  const std::string coordinator = JaxCoordinator(config_).ToString();
  Status s = local_.EnsureJaxInitInfo(*config_.node_rank, coordinator);
  if (!s.ok() && !jax_init_info_failed_) {
    Log()->error("cannot write {}/{}: {}", config_.local_dir, kJaxInitInfoFile, s.message());
  }
  if (s.ok() && !jax_init_info_written_) {
    Log()->info("{}/{}: process index {}, JAX coordinator {}", config_.local_dir, kJaxInitInfoFile,
                *config_.node_rank, coordinator);
  }
  jax_init_info_failed_ = !s.ok();
  jax_init_info_written_ |= s.ok();
}

// A complete replicator.yaml: validate, then run a new incarnation.
void Agent::OnReplicatorYaml() {
  std::string path = YamlPath(config_);
  auto text = ReadFileToString(env_, path, kMaxYamlBytes);
  StatusOr<ReplicatorConfig> parsed =
      text.ok() ? ParseReplicatorConfig(*text) : StatusOr<ReplicatorConfig>(text.status());
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) return;  // already handled
  if (!text.ok() && text.status().code() == StatusCode::kResourceExhausted) {
    parsed = InvalidArgumentError("replicator.yaml: larger than 1 MiB");
  }
  if (!parsed.ok()) {
    Log()->error("rejecting {}: {}", path, parsed.status().message());
    local_.ReportToClient(parsed.status().message(), /*fatal=*/true);
    env_->RemoveFile(path).IgnoreError();
    return;
  }
  for (const auto& k : parsed->unknown_keys)
    Log()->warn("{}: ignoring unknown key \"{}\"", path, k);
  for (const auto& note : parsed->notes) Log()->info("{}: {}", path, note);
  if (config_.node_rank && *config_.node_rank != parsed->node_rank) {
    Log()->warn("{}: node-rank {} differs from this agent's --node-rank {} ({} says {})", path,
                parsed->node_rank, *config_.node_rank, kJaxInitInfoFile, *config_.node_rank);
  }
  Status s;
  try {  // the coordinator's replies are checked, but never trusted to be well-typed
    s = Incarnate(*parsed);
  } catch (const json::exception& e) {
    s = InternalError(std::string("malformed reply from the coordinator: ") + e.what());
  }
  if (s.code() == StatusCode::kCancelled) {  // a newer yaml or shutdown: not the client's error
    Log()->info("job {} node {}: {}", parsed->job_name, parsed->node_rank, s.message());
    return;
  }
  if (!s.ok()) {
    Log()->error("job {} node {}: {}", parsed->job_name, parsed->node_rank, s.message());
    local_.ReportToClient(s.message(), /*fatal=*/true);
    env_->RemoveFile(path).IgnoreError();
  }
}

// Steps 2-6 of the protocol's start-up handshake.
Status Agent::Incarnate(const ReplicatorConfig& config) {
  // A step the previous incarnation's ranks committed just before they
  // exited (an on-demand step, typically) is taken in before the cleanup
  // below would remove it as not ours.
  IngestPytorchSaves();
  IngestCommittedSteps();
  STRATA_RETURN_IF_ERROR(local_.Clean(kReplicatorYaml));
  Incarnation inc;
  inc.config = config;
  if (config.peer_ranks) {
    inc.peers = *config.peer_ranks;
  } else {
    inc.peers = ChoosePeers(config.node_rank, config.nodes, config.peers_per_node.value_or(0),
                            config.assume_data_parallelism.value_or(1));
  }
  AwaitOnDemandReplicated(config.job_name);
  {
    MutexLock l(&mu_);
    inc_.reset();  // stop replicating for the old incarnation
  }
  // The ranks restarted: an on-demand step was for their predecessors.
  sync_->Restart("the job restarted");
  // The job may restore an older step than it had replicated: the
  // watermark is learned afresh (until then, collection keeps everything),
  // and the progress counts per start of the job (strata run --agent's).
  replication_->Forget();
  restoring_ = true;
  Status s = RegisterAndRestore(inc);
  restoring_ = false;
  STRATA_RETURN_IF_ERROR(s);
  SaveState(inc);  // I/O outside mu_; a crash before the next line resumes from it
  MutexLock l(&mu_);
  inc_ = std::move(inc);
  return Status::Ok();
}

// This node's copies of `job`, as [rank, step, digest] triples. Each is
// proven unchanged since it was verified (its seal: no byte read) or else
// read and verified again; a copy that fails is dropped here, before anyone
// plans on it. The copy a plan then restores from this node's own RAM is
// read and verified once more before it is used (FetchAndReport), and a copy
// served to a peer is verified as it is sent and as it arrives.
std::vector<wire::HeldCopy> Agent::Inventory(const std::string& job) {
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

Status Agent::RegisterAndRestore(Incarnation& inc) {
  const ReplicatorConfig& c = inc.config;
  wire::RegisterRequest reg;
  reg.job = c.job_name;
  reg.node = c.node_rank;
  reg.nodes = c.nodes;
  reg.dp = c.assume_data_parallelism.value_or(1);
  reg.address = listen_;
  reg.inventory = Inventory(c.job_name);
  reg.cadence = Cadence(c);
  // Retries of this registration carry the same id: the coordinator keeps
  // the round for them (Coordinator::Register).
  reg.incarnation = IncarnationId();
  bool yaml_deleted = false;
  RetryLog retry_log("registering with the coordinator");
  auto back_off = [this](int attempt) {  // jittered, 0.2 s doubling to 5 s
    const auto wait = storage::BackoffDelay(attempt, std::chrono::milliseconds(200),
                                            std::chrono::milliseconds(5000));
    PollUntil(clock_->Now() + wait, [] { return false; });
  };
  for (int attempt = 1; !Stopping(); ++attempt) {
    if (yaml_deleted && SupersededByNewYaml()) {
      return CancelledError("a new replicator.yaml replaces this incarnation");
    }
    auto registered = CallCoordinator(c, reg.ToJson(), kCallTimeout);
    if (!registered.ok()) {
      retry_log.Failed(registered.status());
      back_off(attempt);
      continue;
    }
    retry_log.Succeeded();
    STRATA_ASSIGN_OR_RETURN(wire::RegisterReply reply, wire::RegisterReply::FromJson(*registered));
    inc.round = reply.round;
    sync_->SetJob(SyncJob{c, inc.round});
    if (!yaml_deleted) {  // only now: clients look for markers once it is gone
      STRATA_RETURN_IF_ERROR(env_->RemoveFile(YamlPath(config_)));
      yaml_deleted = true;
    }
    auto done = FetchAndReport(inc);
    if (done.ok() && *done) return Status::Ok();
    // The coordinator cannot make a plan (e.g. --restore-backup names no
    // complete backup): the client must hear it, not wait.
    if (done.status().code() == StatusCode::kFailedPrecondition) return done.status();
    if (!done.ok()) {
      Log()->warn("round {}: {}; registering again", inc.round, done.status().message());
      back_off(attempt);
    }
  }
  return CancelledError("stopped while registering");
}

// After this incarnation's yaml was deleted, a yaml in the directory is a
// new one: the client restarted and the current restore is moot.
bool Agent::SupersededByNewYaml() const { return env_->Exists(YamlPath(config_)); }

std::optional<Endpoint> Agent::CoordinatorEndpoint(const ReplicatorConfig& c) const {
  if (c.master) {
    auto e = ParseEndpoint(*c.master);
    if (e.ok()) return *e;
  }
  if (config_.coordinator) {
    Endpoint e{config_.coordinator->host, config_.coordinator->port};
    if (c.master_port) e.port = static_cast<uint16_t>(*c.master_port);
    return e;
  }
  if (c.node_rank == 0) return listen_;
  return std::nullopt;
}

StatusOr<json> Agent::CallCoordinator(const ReplicatorConfig& c, json request,
                                      std::chrono::milliseconds timeout) {
  auto to = CoordinatorEndpoint(c);
  if (!to) {
    return FailedPreconditionError(
        "no coordinator: pass --coordinator or set master in "
        "replicator.yaml");
  }
  return coordinator_link_.Call(*to, "node " + std::to_string(c.node_rank), request, timeout);
}

}  // namespace strata::agent

namespace strata::agent {

// Waits for the round's plan, gets this node's data, reports ready and, on
// "go", creates the markers. Returns false... never: true when done, an
// error (e.g. ABORTED: round superseded) when the caller should register again.
StatusOr<bool> Agent::FetchAndReport(Incarnation& inc) {
  const ReplicatorConfig& c = inc.config;
  int64_t version = 0;
  for (int attempt = 0; attempt < 10000 && !Stopping(); ++attempt) {
    if (SupersededByNewYaml())
      return CancelledError("a new replicator.yaml replaces this incarnation");
    // The plan as this node needs it: its own source and the addresses of
    // its holders and peers (O(1) in the job's size).
    wire::AwaitPlanRequest wait;
    wait.job = c.job_name;
    wait.round = inc.round;
    wait.plan_version = version;
    wait.node = c.node_rank;
    wait.peers = inc.peers;
    auto reply = CallCoordinator(c, wait.ToJson(), kCallTimeout);
    if (!reply.ok() && reply.status().code() == StatusCode::kDeadlineExceeded) continue;
    if (!reply.ok()) return reply.status();
    STRATA_ASSIGN_OR_RETURN(wire::PlanReply plan, wire::PlanReply::FromJson(*reply));
    version = plan.plan_version;
    for (const auto& [n, a] : plan.addresses) inc.addresses[n] = a;
    Log()->info("job {} round {} plan {}: {}", c.job_name, inc.round, version, plan.reason);
    if (!plan.error.empty()) return FailedPreconditionError(plan.error);
    const std::optional<int64_t> step = plan.step;
    std::vector<wire::FailedHolder> bad;
    Status got;
    if (step) {
      if (plan.discard_above) DiscardAbove(c.job_name, *plan.discard_above);
      auto own = plan.sources.find(c.node_rank);
      if (own == plan.sources.end()) {
        return InvalidArgumentError("the plan for step " + std::to_string(*step) +
                                    " has no source for node " + std::to_string(c.node_rank));
      }
      const wire::PlanSource& src = own->second;
      StepKey key{c.job_name, src.source_rank, *step};
      const bool have = store_->Has(key);
      // replicator.prerestore names the backup when this node's data comes
      // from it: planned so, or after the peers that should have served failed.
      const bool from_backup = !have && src.holders.size() == 1 && src.holders[0] == kBackupHolder;
      const std::string& backup_id = plan.backup;
      STRATA_RETURN_IF_ERROR(local_.WritePrerestore(step, from_backup ? backup_id : ""));
      int used = c.node_rank;
      if (have) got = VerifyOwnCopy(key, c.node_rank, &bad);
      if (!have) got = FetchStep(inc, key, src, plan, &bad, &used);
      if (got.ok() && used == kBackupHolder && !from_backup) {
        STRATA_RETURN_IF_ERROR(local_.WritePrerestore(step, backup_id));
      }
    } else {
      STRATA_RETURN_IF_ERROR(local_.WritePrerestore(step));
    }
    wire::ReadyRequest ready_request;
    ready_request.job = c.job_name;
    ready_request.round = inc.round;
    ready_request.node = c.node_rank;
    ready_request.plan_version = version;
    ready_request.ok = got.ok();
    ready_request.bad = std::move(bad);
    const json ready = ready_request.ToJson();
    for (;;) {
      auto r = CallCoordinator(c, ready, kCallTimeout);
      if (SupersededByNewYaml())
        return CancelledError("a new replicator.yaml replaces this incarnation");
      if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded && !Stopping()) continue;
      if (!r.ok()) return r.status();
      STRATA_ASSIGN_OR_RETURN(wire::ReadyReply answer, wire::ReadyReply::FromJson(*r));
      if (answer.go) {
        if (answer.sync) sync_->Apply(*answer.sync);  // before any rank can pass it
        STRATA_RETURN_IF_ERROR(CreateMarkers(inc, plan));
        return true;
      }
      break;  // replan: wait for the next plan version
    }
  }
  return CancelledError("stopped while restoring");
}

// Reads and verifies this node's own copy of `key` before the ranks restore
// from it (registration proved it unchanged without reading it). A copy that
// fails is dropped and reported in `bad`, so that the coordinator plans
// another source. `node` is this node's rank.
Status Agent::VerifyOwnCopy(const StepKey& key, int node, std::vector<wire::FailedHolder>* bad) {
  Status v = store_->Verify(key);
  if (v.ok()) return v;
  Log()->warn("own copy {} does not verify, dropped: {}", key.ToString(), v.message());
  store_->Remove(key).IgnoreError();
  bad->push_back({node, key.rank, key.step});
  return v;
}

// Fetches `key` from the first holder in `source` (a plan's entry for this
// node) that serves a copy that verifies: peers first, the backup tier
// last; records the holders that failed in `bad` and the one used in *used.
Status Agent::FetchStep(const Incarnation& inc, const StepKey& key, const wire::PlanSource& source,
                        const wire::PlanReply& plan, std::vector<wire::FailedHolder>* bad,
                        int* used) {
  Status last = NotFoundError("no holder of " + key.ToString());
  for (int holder : source.holders) {
    if (holder == inc.config.node_rank) continue;
    std::string from = "node " + std::to_string(holder);
    Status s;
    if (holder == kBackupHolder) {
      from = "backup " + plan.backup;
      s = FetchFromBackup(plan.backup, key, source.digest);
    } else {
      auto address = plan.addresses.find(holder);
      s = address == plan.addresses.end()
              ? UnavailableError("no address for node " + std::to_string(holder))
              : FetchFrom(address->second, key, inc.config.node_rank, source.digest);
    }
    if (s.ok()) {
      MutexLock l(&mu_);
      last_restore_ = "step " + std::to_string(key.step) + " of node " + std::to_string(key.rank) +
                      " from " + from;
      Log()->info("restored {} from {}", key.ToString(), from);
      *used = holder;
      return s;
    }
    Log()->warn("fetching {} from {}: {}", key.ToString(), from, s.message());
    bad->push_back({holder, key.rank, key.step});
    last = s;
  }
  return last;
}

// Fetches `key` (the copy with `digest`, when the plan gives one) from the
// agent at `address` into the store, over up to
// `data-streams` connections, verified as it arrives (or, fetched the old
// way, when it is committed) before it counts as held.
Status Agent::FetchFrom(const std::string& address, const StepKey& key, int node_rank,
                        std::optional<uint64_t> digest) {
  STRATA_ASSIGN_OR_RETURN(Endpoint to, ParseEndpoint(address));
  STRATA_ASSIGN_OR_RETURN(FetchedCopy copy,
                          FetchCopy(to, config_.secret, "node " + std::to_string(node_rank), key,
                                    config_.data_streams, store_.get(), digest));
  return AdoptCopy(store_.get(), key, copy);
}

Status Agent::CreateMarkers(const Incarnation& inc, const wire::PlanReply& plan) {
  const ReplicatorConfig& c = inc.config;
  if (!plan.step) {
    MutexLock l(&mu_);
    last_restore_ = "nothing to restore (fresh start)";
    restored_step_ = -1;
    return local_.WriteMarkers(c.job_name, c.node_rank, c.workers_per_node, 0, {});
  }
  const int64_t step = *plan.step;
  auto own = plan.sources.find(c.node_rank);
  if (own == plan.sources.end()) {
    return InvalidArgumentError("the plan has no source for node " + std::to_string(c.node_rank));
  }
  const int src = own->second.source_rank;
  {
    MutexLock l(&mu_);
    restored_step_ = step;
    if (last_restore_.find(" from node ") == std::string::npos &&
        last_restore_.find(" from backup ") == std::string::npos) {
      last_restore_ = "step " + std::to_string(step) + " from own store";
    }
  }
  // Every worker restores the step; PyTorch workers each from their own file.
  const std::string target = store_->RelativeStepPath({c.job_name, src, step});
  std::vector<std::string> targets;
  for (int w = 0; w < c.workers_per_node; ++w) {
    targets.push_back(c.framework != Framework::kPytorch
                          ? target
                          : target + "/" + SaveFileName({c.job_name, step, src, w}));
  }
  return local_.WriteMarkers(c.job_name, c.node_rank, c.workers_per_node, step, targets);
}

void Agent::IngestCommittedSteps() {
  std::optional<ReplicatorConfig> c;
  {
    MutexLock l(&mu_);
    if (inc_) c = inc_->config;
  }
  if (!c) return;
  for (int64_t step : local_.CommittedSteps()) {
    StepKey key{c->job_name, c->node_rank, step};
    auto index = store_->Ingest(JoinPath(config_.local_dir, std::to_string(step)), key);
    if (!index.ok()) {
      Log()->error("{}", index.status().message());
      local_.ReportToClient(index.status().message(), /*fatal=*/false);
      continue;
    }
    Log()->info("ingested step {} ({} bytes, digest {})", step, index->total_bytes,
                Hex64(index->digest));
    MutexLock l(&mu_);
    if (index->total_bytes > largest_step_bytes_) {
      largest_step_bytes_ = index->total_bytes;
      const uint64_t in = inc_ ? inc_->peers.size() : 0;  // copies others send here, by symmetry
      Log()->info(
          "RAM needed for {}-byte steps with {} peer(s): about {} bytes ({:.1f}x): the "
          "client's step in progress, 2 own steps and 2 steps per node replicating here",
          largest_step_bytes_, in, (3 + 2 * in) * largest_step_bytes_, 3.0 + 2.0 * in);
    }
    replication_->Enqueue(key);
  }
}

// PyTorch clients write one file per worker, <job>-s<step>-n<node>-w<w>.save;
// once all workers' files of a step are there, they become one step.
void Agent::IngestPytorchSaves() {
  std::optional<ReplicatorConfig> c;
  {
    MutexLock l(&mu_);
    if (inc_ && inc_->config.framework == Framework::kPytorch) c = inc_->config;
  }
  if (!c) return;
  auto entries = env_->ListDir(config_.local_dir);
  if (!entries.ok()) return;
  std::map<int64_t, std::vector<std::string>> by_step;
  for (const auto& e : *entries) {
    auto n = ParseWorkerFileName(e.name, ".save");
    if (n && e.type == DirEntry::Type::kFile && n->job == c->job_name && n->node == c->node_rank) {
      by_step[n->step].push_back(e.name);
    }
  }
  for (const auto& [step, files] : by_step) {
    if (static_cast<int>(files.size()) < c->workers_per_node) continue;
    if (!AllSettled(env_, config_.local_dir, files)) continue;  // a worker may still be writing
    std::string tmp = JoinPath(config_.local_dir, TempDirName(step));
    Status s = env_->CreateDir(tmp);
    for (const auto& f : files) {
      if (s.ok()) s = env_->Rename(JoinPath(config_.local_dir, f), JoinPath(tmp, f));
    }
    // The workers' files are complete (settled); the directory is published
    // by the commit protocol, as every step directory is.
    std::string dir = JoinPath(config_.local_dir, std::to_string(step));
    if (s.ok()) s = CommitDir(env_, tmp, dir);
    if (!s.ok()) Log()->error("collecting the .save files of step {}: {}", step, s.message());
  }
}

}  // namespace strata::agent
