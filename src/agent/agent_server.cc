// Copyright 2026 The Strata Authors.
//
// The agent's calls, as its Server (server.h) hands them over: control
// calls (coordination, status, health, a step's index) on the server's
// workers, long calls (step transfers, maintenance, quarantine) on threads
// of their own with the connection's socket.
#include <unistd.h>

#include <functional>

#include "agent/agent.h"
#include "agent/agent_state.h"
#include "agent/metrics/agent_metrics.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/process.h"
#include "util/time_format.h"
#include "wire/coded.h"
#include "wire/data.h"
#include "wire/op.h"
#include "wire/op_table.h"

namespace strata::agent {

Agent::ControlCalls Agent::MakeControlCalls() {
  using wire::Op;
  ControlCalls t("control");
  t.On<wire::GetIndexRequest>(Op::kGetIndex, [this](const auto& r, Server::Reply&) -> Answer {
    return replication_->HandleGetIndex(r);
  });
  t.OnRaw(Op::kStatus,
          [this](const json&, Server::Reply&) -> Answer { return StatusReport().ToJson(); });
  t.OnRaw(Op::kHealth,
          [this](const json&, Server::Reply&) -> Answer { return HealthReport().ToJson(); });
  t.On<wire::SupervisorRestartRequest>(
      Op::kSupervisorRestart, [this](const auto& r, Server::Reply&) -> Answer {
        Log()->info("strata run restarts the training command ({}, exit code {})", r.reason,
                    r.exit_code);
        metric::SupervisorRestarts(r.reason).Add();
        // The command's process is gone: a restore still under way for it
        // must not join a round or report ready (Restore::ClientEnded).
        restore_->ClientEnded("strata run restarts the training command: " + r.reason +
                              ", exit code " + std::to_string(r.exit_code));
        return json::object();
      });
  // The coordinator answers its calls itself, possibly later.
  for (size_t i = 0; i < wire::kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    if (wire::KindOf(op) != wire::OpKind::kCoordination) continue;
    t.OnRaw(op, [this](const json& request, Server::Reply& reply) -> Answer {
      coordinator_.HandleAsync(request, std::move(reply));
      return std::nullopt;
    });
  }
  return t;
}

Agent::LongCalls Agent::MakeLongCalls() {
  using wire::Op;
  LongCalls t("long");
  t.On<wire::PutStepRequest>(Op::kPutStep,
                             [this](const auto& r, net::Socket& socket) -> StatusOr<json> {
                               STRATA_RETURN_IF_ERROR(CheckPutStep(r.key));
                               return replication_->HandlePutStep(r, socket);
                             });
  t.On<wire::PutFilesRequest>(Op::kPutFiles, [this](const auto& r, net::Socket& socket) {
    return replication_->HandlePutFiles(r, socket);
  });
  t.On<wire::FetchStepRequest>(Op::kFetchStep, [this](const auto& r, net::Socket& socket) {
    return replication_->HandleFetchStep(r, socket);
  });
  t.On<wire::MaintenanceRequest>(
      Op::kMaintenance, [this](const auto& r, net::Socket&) -> StatusOr<json> {
        STRATA_ASSIGN_OR_RETURN(wire::MaintenanceEvent event, maintenance_->Handle(r));
        return event.ToJson();
      });
  t.On<wire::QuarantineRequest>(
      Op::kQuarantine, [this](const auto& r, net::Socket&) { return HandleQuarantine(r); });
  t.On<wire::PutShardRequest>(
      Op::kPutShard, [this](const auto& r, net::Socket& socket) -> StatusOr<json> {
        // Not (yet) this job's, or a start under way: the sender retries.
        const ParityLease lease(this, r.key.job);
        if (!lease.rank()) {
          return UnavailableError("this agent serves no incarnation of job " + r.key.job + " yet");
        }
        return coded_->HandlePutShard(r, socket, *lease.rank());
      });
  t.On<wire::GetShardRequest>(Op::kGetShard, [this](const auto& r, net::Socket& socket) {
    return coded_->HandleGetShard(r, socket);
  });
  return t;
}

Agent::ParityLease::ParityLease(Agent* agent, const std::string& job) : agent_(agent) {
  MutexLock l(&agent_->mu_);
  if (agent_->inc_) {
    if (agent_->inc_->config.job_name == job) rank_ = agent_->inc_->config.node_rank;
  } else if (agent_->holding_ && agent_->holding_->job == job) {
    rank_ = agent_->holding_->rank;
    counted_ = true;
    ++agent_->holding_calls_;
  }
}

Agent::ParityLease::~ParityLease() {
  if (!counted_) return;
  MutexLock l(&agent_->mu_);
  if (--agent_->holding_calls_ == 0) agent_->holding_drained_.SignalAll();
}

void Agent::EndHolding() {
  constexpr auto kLimit = std::chrono::seconds(10);
  MutexLock l(&mu_);
  holding_.reset();
  const auto until = std::chrono::steady_clock::now() + kLimit;
  while (holding_calls_ > 0 && holding_drained_.WaitUntil(&mu_, until)) {
  }
  if (holding_calls_ > 0) {
    Log()->warn(
        "{} chunk(s) of the job's last start still arriving after {} s: listing what "
        "this node holds above the new start's step without them",
        holding_calls_, kLimit.count());
  }
}

namespace {

// The calls only the node's own callers may make: they wipe or stop what the
// job relies on (the RAM tier, a step it may restore), and no agent or
// coordinator sends them over the network. Unparsable requests are refused
// by their handler.
bool LocalOnly(const json& request) {
  StatusOr<wire::Op> op = wire::ParseOp(request);
  if (!op.ok()) return false;
  switch (*op) {
    case wire::Op::kQuarantine:         // strata run --agent: a crash loop
    case wire::Op::kSupervisorRestart:  // strata run --agent: a restart
      return true;
    case wire::Op::kMaintenance: {  // with --lose-ram: wipes the RAM tier
      StatusOr<wire::MaintenanceRequest> r = wire::MaintenanceRequest::FromJson(request);
      return r.ok() && r->lose_ram;
    }
    default:
      return false;
  }
}

}  // namespace

std::string Agent::LocalSocketPath() const {
  return JoinPath(store_->root(), std::string(kAgentSocketName));
}

Status Agent::AuthorizeLocal(const net::LocalPeer& peer) const {
  if (peer.uid == 0 || peer.uid == ::geteuid() || peer.gid == job_group_) return Status::Ok();
  StatusOr<PinnedProcess> caller = PinnedProcess::Open(peer.pid);
  if (caller.ok() && caller->credentials().RunsAs(peer.uid) &&
      caller->credentials().InGroup(job_group_)) {
    return Status::Ok();
  }
  return PermissionDeniedError("uid " + std::to_string(peer.uid) +
                               " is neither the agent's user nor in the job's group " +
                               std::to_string(job_group_));
}

Status Agent::CheckPutStep(const wire::StepKey& key) const {
  MutexLock l(&mu_);
  std::optional<ShardHolder> serving;
  if (inc_) serving = ShardHolder{inc_->config.job_name, inc_->config.node_rank};
  for (const auto& other : {starting_, holding_}) {
    if (other && (!serving || serving->job != key.job)) serving = other;
  }
  if (!serving || serving->job != key.job) {  // not this job's (yet): the sender retries
    return UnavailableError("this agent serves no incarnation of job " + key.job +
                            ": a step of it is not taken");
  }
  if (key.rank == serving->rank) {
    return PermissionDeniedError("a peer sent " + key.ToString() +
                                 ", a step of this node's own rank: those come from its "
                                 "trainer, never from the network");
  }
  return Status::Ok();
}

Status Agent::StartServer() {
  Server::Options options;
  options.trust = trust_;
  options.authorize_local = [this](const net::LocalPeer& peer) { return AuthorizeLocal(peer); };
  options.local_only = LocalOnly;
  options.workers = 4;
  options.max_request_bytes = static_cast<uint32_t>(config_.max_message_bytes);
  // Every call of the protocol has its handler here (a missing one is a
  // bug every agent test meets).
  auto control = std::make_shared<const ControlCalls>(MakeControlCalls());
  auto long_calls = std::make_shared<const LongCalls>(MakeLongCalls());
  std::vector<wire::Op> unserved = control->Unserved(wire::OpKind::kCoordination);
  for (wire::Op op : control->Unserved(wire::OpKind::kControl)) unserved.push_back(op);
  for (wire::Op op : long_calls->Unserved(wire::OpKind::kLong)) unserved.push_back(op);
  if (!unserved.empty()) {
    return InternalError(std::string("the agent has no handler for \"") +
                         wire::OpName(unserved.front()) + "\"");
  }
  Server::Handlers handlers;
  handlers.is_long = [](const std::string& name) { return wire::IsLongCall(name); };
  handlers.control = [control](const json& request, const std::string&, Server::Reply reply) {
    if (Answer answer = control->Serve(request, reply)) reply(std::move(*answer));
  };
  handlers.long_call = [long_calls](const json& request, net::Socket& socket) {
    return long_calls->Serve(request, socket);
  };
  STRATA_ASSIGN_OR_RETURN(server_, Server::Start(std::move(listener_), std::move(options),
                                                 std::move(handlers), std::move(local_listener_)));
  return Status::Ok();
}

// A replica that arrived after this node registered for a restore round:
// without it the round's plan would not know this node holds it (a node
// that left for maintenance replicates its on-demand step while the others
// are already registering).
void Agent::ReportNewCopy(const wire::StepKey& key, uint64_t digest) {
  std::optional<SyncJob> job = sync_->job();
  if (!job || job->config.job_name != key.job) return;
  wire::AddCopiesRequest req;
  req.job = key.job;
  req.round = job->round;
  req.node = job->config.node_rank;
  req.inventory = {{key.rank, key.step, digest}};
  auto r = CallCoordinator(job->config, req.ToJson(), std::chrono::seconds(5));
  if (!r.ok()) Log()->debug("reporting the copy {}: {}", key.ToString(), r.status().message());
}

// The incarnation survives an agent restart, so a restarted agent keeps
// ingesting and replicating without a new replicator.yaml (agent_state.h).
void Agent::SaveState(const Incarnation& inc) {
  SavedState state;
  static_cast<Incarnation&>(state) = inc;
  state.quarantined = restore_->Quarantined(inc.config.job_name);
  Status s = WriteFileAtomic(env_, JoinPath(store_->root(), std::string(kAgentStateFile)),
                             EncodeAgentState(state));
  if (!s.ok()) Log()->warn("saving agent state: {}", s.message());
}

void Agent::LoadState() {
  std::string path = JoinPath(store_->root(), std::string(kAgentStateFile));
  auto text = ReadFileToString(env_, path, 1 << 20);
  if (!text.ok()) return;
  StatusOr<SavedState> state = DecodeAgentState(*text, path);
  if (!state.ok()) {
    Log()->warn("ignoring {}", state.status().message());
    return;
  }
  Incarnation inc = *state;
  const ReplicatorConfig& c = inc.config;
  Log()->info("resuming job {} as node {} of {} ({})", c.job_name, c.node_rank, c.nodes,
              inc.restored_step >= 0
                  ? "its start restored step " + std::to_string(inc.restored_step)
                  : std::string("it started fresh"));
  replication_->Restored(inc.restored_step);
  for (int64_t step : state->quarantined) restore_->NoteQuarantined(c.job_name, step);
  sync_->SetJob(SyncJob{inc.config, inc.round});
  MutexLock l(&mu_);
  inc_ = std::move(inc);
}

wire::StatusReply Agent::StatusReport() const {
  wire::StatusReply r;
  for (const auto& [key, index] : store_->List()) {
    r.steps.push_back({key.job, key.rank, key.step, index.total_bytes, Hex64(index.digest)});
  }
  const Replication::Progress progress = replication_->progress();
  r.local_dir = config_.local_dir;
  r.address = listen_.ToString();
  r.ram_bytes = store_->BytesHeld();
  r.spare_bytes = store_->SpareBytes();
  r.parity_bytes = parity_->BytesHeld();
  for (const auto& [key, h] : parity_->List()) {
    r.parity.push_back({h.step, h.stripe, h.row, h.length, h.complete()});
  }
  r.tmpfs = ram_disk_.tmpfs;
  r.huge = ram_disk_.huge;
  r.watermark = progress.watermark;
  r.newest_replicated = progress.newest_replicated;
  r.newest_ingested = progress.newest_ingested;
  r.queued = progress.queued;
  r.replication_lag_seconds = progress.lag_seconds;
  if (backup_) r.backup = backup_->StatusReport();
  // The ranks registered in the sync map, and the job's on-demand step.
  r.ranks = sync_->RankStatus();
  r.training_step = sync_->node_step();
  if (const int64_t step = sync_->step(); step != kNoSyncStep) r.ondemand_step = step;
  const Restore::Summary restore = restore_->summary();
  r.last_restore = restore.last;
  r.restored_step = restore.step;
  if (restore.state != Restore::State::kIdle) {
    r.restore_state = std::string(Restore::StateName(restore.state));
  }
  MutexLock l(&mu_);
  if (inc_) {
    const ReplicatorConfig& c = inc_->config;
    r.job = wire::StatusReply::Job{c.job_name,
                                   c.node_rank,
                                   c.nodes,
                                   inc_->peers,
                                   inc_->round,
                                   inc_->redundancy.ToString(),
                                   inc_->group ? inc_->group->members : std::vector<int>()};
    // The start's, also when an earlier agent process ran its restore
    // (state.json): `strata run --agent` quarantines it on a crash loop.
    r.restored_step = inc_->restored_step;
  }
  if (std::optional<int64_t> since = maintenance_->since()) r.maintenance_since = Rfc3339(*since);
  r.goodput = goodput_.Report(clock_->Now());
  return r;
}

Status Agent::StartMetrics() {
  if (!config_.metrics) return Status::Ok();  // nothing renders the registry then
  metrics_collector_ = metrics::Default().AddCollector(
      [this](std::vector<metrics::Sample>* out) { CollectMetrics(out); });
  metrics_server_ = std::make_unique<MetricsServer>(&metrics::Default());
  Status s = metrics_server_->Start(config_.metrics->host, config_.metrics->port);
  if (!s.ok()) return s.WithContext("--metrics " + config_.metrics->ToString());
  const Endpoint bound{config_.metrics->host, metrics_server_->port()};
  Log()->info("metrics on http://{}/metrics", bound.ToString());
  return Status::Ok();
}

// Gauges read at scrape time from the components themselves (not through
// StatusReport, which copies every index and reads /proc for each rank).
// The durability lag per tier is the age of the newest step the tier holds:
// this node's newest ingested step (ram), the job's replication watermark
// (peer: every node's step on its peers) and the newest committed backup
// (backup); the job's lag is the maximum over its nodes. A tier with nothing
// known has no sample.
void Agent::CollectMetrics(std::vector<metrics::Sample>* out) const {
  const Replication::Progress p = replication_->progress();
  const metrics::Labels agent = {{"agent", listen_.ToString()}};
  auto add = [&](const char* name, const char* help, double v, metrics::Labels labels) {
    out->push_back({name, help, std::move(labels), v});
  };
  auto with = [&](const char* key, std::string value) {  // the agent's labels and one more
    metrics::Labels l = agent;
    l.emplace_back(key, std::move(value));
    return l;
  };
  add("strata_ram_bytes", "Bytes of steps the agent's store holds (own and peers')",
      static_cast<double>(store_->BytesHeld()), agent);
  add("strata_parity_bytes",
      "Bytes of parity shards the agent holds for its coded group (redundancy xor or rs)",
      static_cast<double>(parity_->BytesHeld()), agent);
  add("strata_ram_spare_bytes",
      "Bytes of spare files the store keeps to receive the next step into (allocated, not free)",
      static_cast<double>(store_->SpareBytes()), agent);
  const auto [pinned, pageable] = sync_->StagingBytes();
  const char* staging_help =
      "Host memory the node's training processes stage saves in (the step files they keep "
      "mapped: device copies land there), page-locked or not";
  add("strata_staging_bytes", staging_help, static_cast<double>(pinned), with("pinned", "true"));
  add("strata_staging_bytes", staging_help, static_cast<double>(pageable), with("pinned", "false"));
  add("strata_replication_queued_steps", "Own steps waiting to be sent to the peers",
      static_cast<double>(p.queued), agent);
  add("strata_training_step", "The newest step a rank on this node checked",
      static_cast<double>(sync_->node_step()), agent);
  add("strata_replication_watermark_step", "The newest step every node has on its peers",
      static_cast<double>(p.watermark), agent);
  const char* lag_help =
      "Age of the newest step the tier holds: the training a failure recovered from that tier "
      "would lose now (max over nodes for the job)";
  if (p.own_age_seconds >= 0) {
    add("strata_durability_lag_seconds", lag_help, p.own_age_seconds, with("tier", "ram"));
  }
  if (p.watermark_age_seconds >= 0) {
    add("strata_durability_lag_seconds", lag_help, p.watermark_age_seconds, with("tier", "peer"));
  }
  if (backup_) {
    const wire::BackupStatus b = backup_->StatusReport();
    if (b.newest) {
      add("strata_durability_lag_seconds", lag_help, static_cast<double>(b.lag_seconds),
          with("tier", "backup"));
    }
  }
  for (const auto& [peer, age] : p.peer_lags) {
    add("strata_replication_peer_lag_seconds",
        "Age of the newest own step each peer holds (its part of the peer tier's lag)", age,
        with("peer", peer));
  }
  if (std::optional<wire::Goodput> g = goodput_.Report(clock_->Now())) {
    const char* help =
        "Where the job's time on this node went since it first started under this agent "
        "(strata goodput)";
    for (const wire::GoodputCategory& c : wire::kGoodputCategories) {
      add("strata_goodput_seconds", help, (*g).*c.seconds, with("category", c.name));
    }
  }
}

}  // namespace strata::agent
