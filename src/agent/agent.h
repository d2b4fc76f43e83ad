// Copyright 2026 The Strata Authors.
//
// Agent: the per-node replicator daemon behind `strata agent`. It
//   * implements the client file protocol in the local directory
//     (replicator.yaml handshake, cleanup, prerestore, restore markers);
//   * ingests committed steps into its Store without copying;
//   * replicates each new step to the node's peers, and takes the peers'
//     steps (Replication, replication.h);
//   * plans and performs restores together with the other agents (the
//     agent of node rank 0, or whichever --coordinator names, coordinates;
//     Coordinator, coordinator.h), each start of the client a Restore
//     (restore.h);
//   * handles maintenance events and its own SIGTERM (Maintenance,
//     maintenance.h, around OnDemandSync, ondemand_sync.h);
//   * keeps RAM use bounded by garbage-collecting steps every node has
//     replicated past.
//   * uploads its part of each backup the coordinator begins, and restores
//     from a backup when no in-cluster copy is newer (NodeBackup,
//     node_backup.h; wired in agent_backup.cc).
// See docs/agent.md and docs/backup.md. Threads: the main loop (Run); the
// Server's event loop, its workers and one thread per long call (server.h);
// the coordinator's timer; Replication's sending thread; OnDemandSync's
// notice and sync threads; with --backup, NodeBackup's upload thread. Lock
// order: the agent's mu_, then a component's (Store, Replication, Restore,
// Maintenance, OnDemandSync, NodeBackup, Coordinator); a component calls
// its hooks (which take mu_) with no lock of its own held. The agent's own
// state under mu_ is the incarnation.
#ifndef STRATA_AGENT_AGENT_H_
#define STRATA_AGENT_AGENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "agent/agent_state.h"
#include "agent/config/config.h"
#include "agent/coordinator/coordinator.h"
#include "agent/metrics/metrics_server.h"
#include "agent/node/backup_requests.h"
#include "agent/node/client_files.h"
#include "agent/node/goodput.h"
#include "agent/node/maintenance.h"
#include "agent/node/node_backup.h"
#include "agent/node/ondemand_sync.h"
#include "agent/node/restore.h"
#include "agent/peer/coded_tier.h"
#include "agent/peer/replication.h"
#include "agent/rpc/client.h"
#include "agent/rpc/server.h"
#include "agent/rpc/transfer.h"
#include "agent/store/local_dir.h"
#include "agent/store/parity_store.h"
#include "agent/store/store.h"
#include "net/socket.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "util/ram_disk.h"
#include "util/thread_pool.h"
#include "wire/control.h"
#include "wire/coordination.h"
#include "wire/data.h"
#include "wire/op_table.h"

namespace strata::agent {

class Agent {
 public:
  // Opens the store, binds the listening socket and starts the server and
  // replication threads. Every file operation on the local directory goes
  // through `env` (tests inject faults with it; several agents may run in
  // one process).
  // Decisions from elapsed time (lags, health) read `clock`.
  static StatusOr<std::unique_ptr<Agent>> Start(AgentConfig config, Env* env = Env::Default(),
                                                SteadyClock* clock = SteadyClock::Real());
  ~Agent();

  // Runs the main loop until `stop` becomes true, or until a drain that
  // `drain` (may be null) asked for is over: the job's on-demand step saved
  // and replicated and the ranks gone, or the configured grace period spent.
  Status Run(const std::atomic<bool>& stop, const std::atomic<bool>* drain = nullptr);

  // The bound listening endpoint (useful with port 0).
  Endpoint listen_endpoint() const { return listen_; }
  // The agent's store, for tests and benchmarks that act as its GC.
  Store* store_for_testing() { return store_.get(); }
  // The state `strata status` shows.
  wire::StatusReply StatusReport() const;

 private:
  Agent(AgentConfig config, net::Trust trust, Env* env, SteadyClock* clock);

  // Main loop.
  Status RunLoop(const std::atomic<bool>& stop);
  void OnEvents(bool yaml_complete);
  void OnReplicatorYaml();
  Status Incarnate(const ReplicatorConfig& config);
  // Wires Restore (restore.h), which takes the node from a yaml to the
  // markers, to the on-demand step.
  void OpenRestore();
  // Ingests the job's committed steps (ClientFiles) and queues them for
  // the peers.
  void IngestClientSteps();
  std::optional<Endpoint> CoordinatorEndpoint(const ReplicatorConfig& config) const;
  // The job's peer tier: its yaml's redundancy, else this agent's, else copies.
  ec::Redundancy RedundancyOf(const ReplicatorConfig& config) const {
    return config.redundancy.value_or(config_.redundancy.value_or(ec::Redundancy{}));
  }
  StatusOr<json> CallCoordinator(const ReplicatorConfig& config, json request,
                                 std::chrono::milliseconds timeout);
  // CallCoordinator, as the components' hooks take it.
  CoordinatorCall CoordinatorCaller() {
    return [this](const ReplicatorConfig& job, const json& request,
                  std::chrono::milliseconds timeout) {
      return CallCoordinator(job, request, timeout);
    };
  }
  // Writes `inc` to the state file (no lock: the caller owns it).
  void SaveState(const Incarnation& inc);
  void LoadState();
  void ResumeReplication();
  // Wires Replication (replication.h) to the incarnation, the coordinator
  // and the backups.
  void OpenReplication();
  // The coordinator's answer to a replication report: its backup news.
  void OnReplicatedReply(const ReplicatorConfig& c, const wire::ReplicatedReply& reply);
  void LogRamDisk() const;

  // Maintenance: the job's on-demand step (OnDemandSync, ondemand_sync.h),
  // maintenance events and drains (Maintenance, maintenance.h), health
  // (agent_maintenance.cc).
  using SyncJob = OnDemandSync::Job;
  Status OpenOnDemandSync();
  void OpenMaintenance();
  // `strata run --agent` found a crash loop on `step`: the job must never
  // restore it again (the coordinator's "quarantine").
  StatusOr<json> HandleQuarantine(const wire::QuarantineRequest& request);
  wire::HealthReply HealthReport() const;

  // Backups (agent_backup.cc; the component is NodeBackup).
  Status OpenBackup();
  // Backup fields for the coordinator: the cadence (replicator.yaml's, else
  // ours) and the workers per node.
  wire::Cadence Cadence(const ReplicatorConfig& c) const;

  // Calls, as the Server hands them over (agent_server.cc).
  Status StartServer();
  // Registers the gauges computed at scrape time (from StatusReport) and,
  // with --metrics, serves them.
  Status StartMetrics();
  void CollectMetrics(std::vector<metrics::Sample>* out) const;
  // A handler per call of the protocol (wire/op.h), each with its typed
  // request: control calls, answered now or (a coordination call that
  // parks) later through the reply; long calls, with the connection.
  using Answer = std::optional<StatusOr<json>>;
  using ControlCalls = wire::OpTable<Answer(Server::Reply&)>;
  using LongCalls = wire::OpTable<StatusOr<json>(net::Socket&)>;
  ControlCalls MakeControlCalls();
  LongCalls MakeLongCalls();
  // The Unix-domain socket of the node's own callers, and who may use it:
  // root, the agent's user and the job's group (the local directory's).
  std::string LocalSocketPath() const;
  Status AuthorizeLocal(const net::LocalPeer& peer) const;
  // A peer's step is taken only for the job this agent serves (or is
  // starting, or held parity for until its current start) and never as
  // this node's own step.
  Status CheckPutStep(const wire::StepKey& key) const EXCLUDES(mu_);
  // The rank whose parity rows this agent holds for `job`, for one
  // put_shard: its start's, or, between two starts, the last one's
  // (holding_); none else. A call taken for the last start is counted for
  // the lease's life, so that EndHolding waits for it.
  class ParityLease {
   public:
    ParityLease(Agent* agent, const std::string& job);
    ~ParityLease();
    ParityLease(const ParityLease&) = delete;
    ParityLease& operator=(const ParityLease&) = delete;
    std::optional<int> rank() const { return rank_; }

   private:
    Agent* const agent_;
    std::optional<int> rank_;
    bool counted_ = false;
  };
  // The new start is about to list what this node holds above its plan's
  // step (Restore::Hooks::before_listing): no chunk of the last start is
  // taken from now on, and those being taken land first (10 s at most).
  void EndHolding();

  const AgentConfig config_;
  const net::Trust trust_;  // every connection to and from other agents
  Env* const env_;
  SteadyClock* const clock_;
  const LocalDir local_;  // config_.local_dir, the client's
  ThreadPool pool_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ParityStore> parity_;  // the coded tier's shards
  std::unique_ptr<CodedTier> coded_;
  RamDisk ram_disk_;     // what backs config_.local_dir; set at start
  gid_t job_group_ = 0;  // config_.local_dir's group: the ranks'; set at start
  Coordinator coordinator_{std::chrono::seconds(2), clock_};
  // Calls to the coordinator keep their connections (one per thread that
  // calls at a time): N nodes cost it N connections, not N handshakes per call.
  RpcPool coordinator_link_{trust_};
  net::Socket listener_;
  net::Socket local_listener_;  // <local>/.strata-agent/agent.sock
  Endpoint listen_;
  std::atomic<bool> stopping_{false};
  // Run's flags; threads started before Run read them, hence atomic.
  std::atomic<const std::atomic<bool>*> stop_flag_{nullptr};
  std::atomic<const std::atomic<bool>*> drain_flag_{nullptr};
  // True once the agent should wind down: long waits check it.
  bool Stopping() const {
    const std::atomic<bool>* stop = stop_flag_.load();
    return stopping_.load() || (stop != nullptr && stop->load());
  }
  // While a restore runs, copies that arrive are added to the round's
  // inventory.
  void ReportNewCopy(const wire::StepKey& key, uint64_t digest);

  mutable Mutex mu_;
  std::optional<Incarnation> inc_ GUARDED_BY(mu_);
  // Between two starts of a job in which this node keeps its rank, the
  // parity rows it holds are the same, and chunks of the last start still
  // on their way (the on-demand step's, often) are taken (ParityLease).
  // Set from the last start as a start begins; cleared for another job or
  // rank, by EndHolding, by a start that failed, and once a start is
  // served; kept across a start cancelled by a newer one.
  struct ShardHolder {
    std::string job;
    int rank = 0;
  };
  std::optional<ShardHolder> holding_ GUARDED_BY(mu_);
  std::optional<ShardHolder> starting_ GUARDED_BY(mu_);  // the start Incarnate runs
  int holding_calls_ GUARDED_BY(mu_) = 0;                // put_shard calls taken through holding_
  CondVar holding_drained_;                              // holding_calls_ fell to 0
  std::unique_ptr<NodeBackup> backup_;                   // null without --backup
  BackupRequests requests_;                              // steps the client asked to back up
  std::unique_ptr<Replication> replication_;
  std::unique_ptr<Restore> restore_;
  std::unique_ptr<Server> server_;

  std::unique_ptr<OnDemandSync> sync_;
  std::unique_ptr<Maintenance> maintenance_;
  // The run loop's thread only.
  std::unique_ptr<ClientFiles> client_;
  // --metrics: the HTTP endpoint, and this agent's collector in the
  // process's registry (0: none).
  std::unique_ptr<MetricsServer> metrics_server_;
  int metrics_collector_ = 0;
  // Where the job's time went (strata goodput); thread-safe.
  GoodputLedger goodput_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_AGENT_H_
