// Copyright 2026 The Strata Authors.
//
// Maintenance: the node's side of a planned interruption, a component of
// the agent around its OnDemandSync (ondemand_sync.h: the sync map, notices
// to the coordinator, the job's on-demand step):
//   * an event (`strata maintenance`): a notice to the job, SIGTERM to the
//     ranks registered here (SIGKILL at the deadline), a wait for their
//     on-demand step to be stored (with lose_ram: on every peer), the RAM
//     wiped when the node loses it, and a record of what happened;
//   * a drain (SIGTERM to the agent): the notice, then a wait until the
//     ranks are gone and their step is on the peers, within the grace period;
//   * holding the node: a client's new replicator.yaml seen during an event
//     waits until the event is over;
//   * the on-demand step first: a restart of the job waits (bounded) until
//     the old step is on the peers, and backup uploads yield to it.
// The newest event is kept in `record_path` (the commit protocol), so a
// restarted agent still reports it through health.
//
// Threads: an event runs on the server's long-call thread that carries
// `strata maintenance`; a drain on the agent's main loop; the yield on the
// backup thread. Maintenance calls its hooks, which take the agent's lock,
// with no lock of its own held; its waits poll the clock and `stopping`.
#ifndef STRATA_AGENT_NODE_MAINTENANCE_H_
#define STRATA_AGENT_NODE_MAINTENANCE_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "agent/node/node_backup.h"
#include "agent/node/ondemand_sync.h"
#include "agent/peer/replication.h"
#include "agent/store/local_dir.h"
#include "agent/store/parity_store.h"
#include "agent/store/store.h"
#include "strata/env.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "wire/control.h"

namespace strata::agent {

class Maintenance {
 public:
  // The job this node serves now (the agent's incarnation).
  struct Job {
    std::string name;
    int node = 0;
    bool has_peers = false;
  };
  struct Hooks {
    std::function<std::optional<Job>()> job;
    // A restart of the client is restoring from this node's store.
    std::function<bool()> restoring;
    std::function<bool()> stopping;
  };
  // The parts of the node an event acts on; all must outlive the
  // Maintenance; `backup` may be null.
  struct Parts {
    Store* store = nullptr;
    const LocalDir* local = nullptr;
    Replication* replication = nullptr;
    OnDemandSync* sync = nullptr;
    NodeBackup* backup = nullptr;
    ParityStore* parity = nullptr;  // wiped with the steps
  };

  // Reads the record at `record_path` (an unreadable one is logged and
  // ignored).
  Maintenance(Env* env, SteadyClock* clock, std::string record_path, Parts parts, Hooks hooks);
  Maintenance(const Maintenance&) = delete;
  Maintenance& operator=(const Maintenance&) = delete;

  // Runs one event to its end; FAILED_PRECONDITION while another runs.
  StatusOr<wire::MaintenanceEvent> Handle(const wire::MaintenanceRequest& request) EXCLUDES(mu_);

  // SIGTERM to the agent: tells the job (when ranks are here) and returns
  // the drain's deadline, `grace` from now; DrainOver says when it is over
  // (the deadline passed, or the ranks gone, their step replicated and the
  // notice heard).
  SteadyClock::time_point BeginDrain(std::chrono::seconds grace);
  bool DrainOver(SteadyClock::time_point deadline) const;

  // The client wrote a complete replicator.yaml (`complete`), or the main
  // loop asks again: true when the agent should take it now. During an
  // event the yaml waits and is taken once the event is over.
  bool TakeYaml(bool complete) EXCLUDES(mu_);

  // Before a new start of `job` drops the replication queue: waits (at most
  // 30 s) until the old start's on-demand step is on the peers.
  void AwaitOnDemandReplicated(const std::string& job);
  // Before each backup upload: waits while the job's on-demand step is not
  // yet on the peers, for at most a minute after it was decided.
  void YieldToOnDemandReplication();

  // The event under way (unix ms of its start), and the newest one.
  std::optional<int64_t> since() const EXCLUDES(mu_);
  std::optional<wire::MaintenanceEvent> last() const EXCLUDES(mu_);

 private:
  // Polls `done` until it holds, `deadline` passes or the agent stops; true
  // if it held.
  bool PollUntil(SteadyClock::time_point deadline, const std::function<bool()>& done) const;
  // This node's on-demand step is on every peer (or there is none, or no job).
  bool OnDemandStepReplicated() const;
  void StopRanks(const std::vector<std::pair<int, int64_t>>& ranks,
                 SteadyClock::time_point deadline, wire::MaintenanceEvent& event);
  void AwaitOnDemandStep(bool on_peers, SteadyClock::time_point deadline,
                         wire::MaintenanceEvent& event);
  // The node comes back empty: every step held and every client file go.
  void WipeRam();
  void Record(const wire::MaintenanceEvent& event) EXCLUDES(mu_);
  void Load() EXCLUDES(mu_);

  Env* const env_;
  SteadyClock* const clock_;
  const std::string record_path_;
  const Parts parts_;
  const Hooks hooks_;

  mutable Mutex mu_;
  std::optional<int64_t> since_ GUARDED_BY(mu_);                // unix ms, an event in progress
  bool yaml_deferred_ GUARDED_BY(mu_) = false;                  // seen during an event
  std::optional<wire::MaintenanceEvent> last_ GUARDED_BY(mu_);  // the newest
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_MAINTENANCE_H_
