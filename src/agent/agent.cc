// Copyright 2026 The Strata Authors.
//
// The agent's start, main loop and incarnation: it wires the components
// (ClientFiles, Restore, Replication, Maintenance, OnDemandSync,
// NodeBackup, the Coordinator and the Server) together. Their wiring lives
// in agent_replication.cc, agent_maintenance.cc, agent_backup.cc and
// agent_server.cc.
#include "agent/agent.h"

#include <sys/socket.h>

#include "agent/plan/planner.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/ram_disk.h"

namespace strata::agent {

Agent::Agent(AgentConfig config, net::Trust trust, Env* env, SteadyClock* clock)
    : config_(std::move(config)),
      trust_(std::move(trust)),
      env_(env),
      clock_(clock),
      local_(env, config_.local_dir),
      pool_(ThreadPool::DefaultThreads() - 1) {}

StatusOr<std::unique_ptr<Agent>> Agent::Start(AgentConfig config, Env* env, SteadyClock* clock) {
  STRATA_ASSIGN_OR_RETURN(net::Trust trust,
                          net::MakeTrust(config.secret, config.tls, config.job_name));
  if (!trust.encrypted()) {
    Log()->warn(
        "TLS is off (tls: off): connections between agents are not encrypted, and anyone on "
        "the network path can read and change checkpoint data in flight");
  }
  std::unique_ptr<Agent> a(new Agent(std::move(config), std::move(trust), env, clock));
  STRATA_ASSIGN_OR_RETURN(a->job_group_, SecureLocalDir(a->config_.local_dir));
  STRATA_ASSIGN_OR_RETURN(a->store_, Store::Open(a->config_.local_dir, &a->pool_, env));
  STRATA_ASSIGN_OR_RETURN(a->parity_, ParityStore::Open(JoinPath(a->store_->root(), "parity"), env,
                                                        ParityStore::kContendedStall, clock));
  a->coded_ = std::make_unique<CodedTier>(
      CodedTier::Options{a->trust_, a->config_.local_dir, a->config_.data_streams}, a->store_.get(),
      a->parity_.get(), clock);
  a->ram_disk_ = DescribeRamDisk(a->config_.local_dir);
  a->LogRamDisk();
  STRATA_ASSIGN_OR_RETURN(
      a->listener_, net::Socket::Listen(a->config_.listen.host, a->config_.listen.port, SOMAXCONN));
  STRATA_ASSIGN_OR_RETURN(uint16_t port, a->listener_.LocalPort());
  // The node's own callers: the agent's user and the job's group may connect.
  STRATA_ASSIGN_OR_RETURN(
      a->local_listener_,
      net::Socket::ListenLocal(a->LocalSocketPath(), SOMAXCONN, 0660, a->job_group_));
  // Advertise the configured port, or the bound one when listening on port 0.
  uint16_t advertised = a->config_.listen.port == 0 ? port : a->config_.advertise.port;
  a->listen_ = Endpoint{a->config_.advertise.host, advertised};
  STRATA_RETURN_IF_ERROR(a->OpenBackup());
  STRATA_RETURN_IF_ERROR(a->OpenOnDemandSync());
  a->OpenReplication();
  a->client_ = std::make_unique<ClientFiles>(
      env, clock, a->store_.get(), &a->local_,
      ClientFiles::Options{a->config_.node_rank, JaxCoordinator(a->config_).ToString(),
                           JoinPath(a->store_->root(), std::string(kPendingStartFile))});
  a->OpenRestore();
  a->OpenMaintenance();
  a->LoadState();
  a->ResumeReplication();
  STRATA_RETURN_IF_ERROR(a->StartServer());
  STRATA_RETURN_IF_ERROR(a->StartMetrics());
  a->replication_->Start();
  if (a->backup_) a->backup_->Start();
  a->sync_->Start();
  Log()->info("agent for {} listening on {} ({}, {} held)", a->config_.local_dir,
              a->listen_.ToString(), a->trust_.Describe(), a->store_->List().size());
  return a;
}

void Agent::OpenRestore() {
  Restore::Options options;
  options.trust = trust_;
  options.data_streams = config_.data_streams;
  options.address = listen_;
  options.yaml_path = client_->yaml_path();
  options.domain = config_.failure_domain;
  options.coded = coded_.get();
  Restore::Hooks hooks;
  hooks.call_coordinator = CoordinatorCaller();
  hooks.stopping = [this] { return Stopping(); };
  hooks.on_round = [this](const ReplicatorConfig& job, int64_t round) {
    sync_->SetJob(SyncJob{job, round});
  };
  hooks.on_sync = [this](const wire::SyncDecision& decision) { sync_->Apply(decision); };
  // Answered from here on: a crash before the markers costs the client its
  // timeout, a crash after them must not run the start again for a client
  // already training.
  hooks.on_go = [this] { return client_->EndPendingStart(); };
  hooks.before_listing = [this] { EndHolding(); };
  restore_ = std::make_unique<Restore>(env_, clock_, store_.get(), &local_, backup_.get(),
                                       std::move(options), std::move(hooks));
}

void Agent::LogRamDisk() const {
  const std::string& dir = config_.local_dir;
  if (!ram_disk_.tmpfs) {
    Log()->warn("{} is not on a tmpfs: steps are written to a disk, not kept in RAM", dir);
  } else if (!ram_disk_.HugePages()) {
    Log()->info(
        "{} is a tmpfs with 4 KiB pages (huge={}): mounted with huge=within_size it receives, "
        "verifies and restores steps faster (docs/agent-design.md, \"The RAM disk\")",
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
  std::optional<wire::StepKey> newest;
  for (const auto& [key, index] : store_->List()) {
    if (key.job == inc_->config.job_name && key.rank == inc_->config.node_rank) newest = key;
  }
  if (newest) replication_->Enqueue(*newest);
}

Agent::~Agent() {
  if (metrics_collector_ != 0) metrics::Default().RemoveCollector(metrics_collector_);
  if (metrics_server_) metrics_server_->Stop();
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
  // A yaml written while we were down counts at once (with inotify).
  STRATA_ASSIGN_OR_RETURN(bool yaml_at_start, client_->Watch());
  OnEvents(yaml_at_start);
  std::optional<SteadyClock::time_point> drain_until;
  while (!stop.load()) {
    const std::atomic<bool>* drain = drain_flag_.load();
    if (drain != nullptr && drain->load()) {  // SIGTERM: the node is going away
      if (!drain_until) drain_until = maintenance_->BeginDrain(config_.grace);
      if (maintenance_->DrainOver(*drain_until)) break;
    }
    // 50 ms: the ledger's resolution (the sync map's step is as fresh).
    STRATA_ASSIGN_OR_RETURN(std::optional<bool> look, client_->Wait(std::chrono::milliseconds(50)));
    if (look) OnEvents(*look);
    goodput_.Sample(clock_->Now(), sync_->node_step(), sync_->RankStatus());
  }
  return Status::Ok();
}

void Agent::OnEvents(bool yaml_complete) {
  // A maintenance event holds the node: a restarted client's new yaml
  // waits until it is over (and, with --lose-ram, the RAM is wiped).
  yaml_complete = maintenance_->TakeYaml(yaml_complete);
  client_->KeepJaxInitInfo();  // before the yaml: Orbax reads it first
  if (yaml_complete) OnReplicatorYaml();
  IngestClientSteps();
}

// A complete replicator.yaml: validate, then run a new incarnation.
void Agent::OnReplicatorYaml() {
  StatusOr<ReplicatorConfig> parsed = client_->TakeYaml();
  if (!parsed.ok()) return;  // none (already taken), or refused and reported
  Status s;
  try {  // every answer is parsed typed; a throw here is a bug, not a crash
    s = Incarnate(*parsed);
  } catch (const std::exception& e) {
    s = InternalError(std::string("restoring job ") + parsed->job_name + ": " + e.what());
  }
  if (s.code() == StatusCode::kCancelled) {  // a newer yaml or shutdown: not the client's error
    Log()->info("job {} node {}: {}", parsed->job_name, parsed->node_rank, s.message());
    if (!Stopping()) client_->EndPendingStart().IgnoreError();  // else the next process resumes it
    return;
  }
  if (!s.ok()) {
    {
      MutexLock l(&mu_);
      holding_.reset();  // no later restore of this start lists what came
      starting_.reset();
    }
    Log()->error("job {} node {}: {}", parsed->job_name, parsed->node_rank, s.message());
    client_->EndPendingStart().IgnoreError();  // first: a failed start is never resumed
    client_->Fail(s);
  }
}

// Steps 2-6 of the protocol's start-up handshake.
Status Agent::Incarnate(const ReplicatorConfig& config) {
  // A step the previous incarnation's ranks committed just before they
  // exited (an on-demand step, typically) is taken in before the cleanup
  // below would remove it as not ours.
  IngestClientSteps();
  goodput_.StartBegan(clock_->Now());
  STRATA_RETURN_IF_ERROR(local_.Clean(kReplicatorYaml));
  // Before the yaml goes: clients read replicator.errors as soon as it has.
  for (const std::string& warning : client_->yaml_warnings()) {
    local_.ReportToClient(warning, /*fatal=*/false);
  }
  Incarnation inc;
  inc.config = config;
  if (config.peer_ranks) {
    inc.peers = *config.peer_ranks;
  } else {
    inc.peers = ChoosePeers(config.node_rank, config.nodes, config.peers_per_node.value_or(0),
                            config.assume_data_parallelism.value_or(1));
  }
  inc.redundancy = RedundancyOf(config);
  if (inc.redundancy.coded()) {
    if (config.nodes < inc.redundancy.group_size()) {
      return FailedPreconditionError("redundancy " + inc.redundancy.ToString() +
                                     " needs groups of " +
                                     std::to_string(inc.redundancy.group_size()) + " nodes; job " +
                                     config.job_name + " has " + std::to_string(config.nodes));
    }
    if (!inc.peers.empty()) {
      Log()->info(
          "job {}: redundancy {} codes the peer tier; the {} peer(s) the yaml asks for "
          "hold no copies",
          config.job_name, inc.redundancy.ToString(), inc.peers.size());
    }
    inc.peers.clear();
  }
  maintenance_->AwaitOnDemandReplicated(config.job_name);
  {
    MutexLock l(&mu_);
    starting_ = ShardHolder{config.job_name, config.node_rank};
    if (inc_) holding_ = ShardHolder{inc_->config.job_name, inc_->config.node_rank};
    if (holding_ && (holding_->job != config.job_name || holding_->rank != config.node_rank)) {
      holding_.reset();  // other parity rows from now on
    }
    inc_.reset();  // stop replicating for the old incarnation
  }
  // The ranks restarted: an on-demand step was for their predecessors.
  sync_->Restart("the job restarted");
  // The job may restore an older step than it had replicated: the
  // watermark is learned afresh (until then, collection keeps everything),
  // and the progress counts per start of the job (strata run --agent's).
  replication_->Forget();
  StatusOr<Restore::Outcome> restored = restore_->Run(
      {config, inc.peers, Cadence(config), inc.redundancy, client_->taken_yaml_identity()});
  STRATA_RETURN_IF_ERROR(restored.status());
  const int64_t restored_step = restore_->summary().step;
  replication_->Restored(restored_step);
  requests_.Restored(config.job_name, config.node_rank, restored_step);
  inc.restored_step = restored_step;
  goodput_.StartDone(clock_->Now(), restored_step);
  inc.round = restored->round;
  inc.addresses = std::move(restored->addresses);
  inc.group = std::move(restored->group);
  if (inc.redundancy.coded() && !inc.group) {
    return FailedPreconditionError("the coordinator gave node " + std::to_string(config.node_rank) +
                                   " no coded group for redundancy " + inc.redundancy.ToString());
  }
  SaveState(inc);  // I/O outside mu_; a crash before the next line resumes from it
  MutexLock l(&mu_);
  inc_ = std::move(inc);
  holding_.reset();
  starting_.reset();
  return Status::Ok();
}

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

void Agent::IngestClientSteps() {
  std::optional<ReplicatorConfig> job;
  ClientFiles::PeerTier tier;
  {
    MutexLock l(&mu_);
    if (!inc_) return;
    job = inc_->config;
    tier = {inc_->redundancy, inc_->peers.size(), inc_->group ? inc_->group->k() : 0};
  }
  std::set<int64_t> requested;  // steps the client asked to back up
  const std::vector<wire::StepKey> ingested = client_->Ingest(*job, tier, &requested);
  for (int64_t step : requested) {
    Log()->info("job {}: the client asks for a backup of step {}", job->job_name, step);
    if (std::optional<int64_t> displaced = requests_.Add({job->job_name, job->node_rank, step})) {
      local_.ReportToClient("the requested backup of step " + std::to_string(*displaced) +
                                " is not made: " + std::to_string(wire::kMaxRequestedBackups) +
                                " newer requests are pending",
                            /*fatal=*/false);
    }
  }
  for (const wire::StepKey& key : ingested) replication_->Enqueue(key, requested.count(key.step));
  // Not behind a send to a slow peer: the RAM disk would fill meanwhile.
  if (!ingested.empty()) replication_->CollectNow();
}

}  // namespace strata::agent
