// Copyright 2026 The Strata Authors.
//
// OnDemandSync: the node's part in the job's on-demand step, a component of
// the agent with its own state, lock and threads. It owns the sync map
// (format/sync_map.h) the node's ranks register in, and
//   * watches the ranks (notice thread): their newest step and rate, and
//     their maintenance notices, which it tells the coordinator (retrying
//     until heard); it withdraws a published step once every rank that was
//     there at publication served it or exited;
//   * keeps one "sync" call waiting at the coordinator (sync thread), on one
//     connection, and publishes the step the coordinator decides for the
//     job's current round in the sync map;
//   * remembers this node's on-demand step (replicated first, held for by a
//     drain or a maintenance event) until the job restarts or the RAM goes.
//
// Which pids are ranks. The map is writable by the job's group (0660), and a
// pid in it is only a claim: the first time a pid appears in a slot it is
// pinned with a pidfd (util/process.h) and registered only if that process
// is in the job's group (its real, effective, saved, file-system or a
// supplementary group is `group`) and is neither pid 1 nor the agent. Only
// registered processes count as ranks: they alone are signalled (through
// the pidfd, so never a process that got the pid later), counted, waited
// for and heard. A refused pid is logged once.
//
// Threads and locks: the notice and sync threads; every public method may be
// called from any thread, also with the caller's lock held (the agent's
// comes first); OnDemandSync calls its hooks with no lock of its own held.
#ifndef STRATA_AGENT_NODE_ONDEMAND_SYNC_H_
#define STRATA_AGENT_NODE_ONDEMAND_SYNC_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/config/config.h"
#include "agent/rpc/client.h"
#include "format/sync_map.h"
#include "net/endpoint.h"
#include "net/socket.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "util/process.h"
#include "wire/control.h"
#include "wire/coordination.h"

namespace strata::agent {

class OnDemandSync {
 public:
  // The job and round the on-demand step is agreed for.
  struct Job {
    ReplicatorConfig config;
    int64_t round = 0;
  };
  struct Hooks {
    CoordinatorCall call_coordinator;
    // Where the job's coordinator listens, if known.
    std::function<std::optional<Endpoint>(const ReplicatorConfig&)> coordinator;
    // Whether the agent winds down (the threads end).
    std::function<bool()> stopping;
  };

  // Opens (or creates) the sync map at `path`, writable by the job's
  // `group` (the local directory's); a step a previous agent process
  // published there is withdrawn. Start() starts the threads.
  static StatusOr<std::unique_ptr<OnDemandSync>> Open(const std::string& path, gid_t group,
                                                      net::Trust trust, SteadyClock* clock,
                                                      Hooks hooks);
  ~OnDemandSync();  // Stop()
  OnDemandSync(const OnDemandSync&) = delete;
  OnDemandSync& operator=(const OnDemandSync&) = delete;

  void Start();
  // Ends both threads; a waiting sync call is cut short.
  void Stop();

  // The job this node registered for (from then on notices reach its
  // coordinator and decisions for its round are published), or none.
  void SetJob(std::optional<Job> job) EXCLUDES(mu_);
  std::optional<Job> job() const EXCLUDES(mu_);
  // The job restarted: its ranks are new, so an on-demand step published or
  // remembered here was for their predecessors. Forgets the job until the
  // next SetJob.
  void Restart(const char* why) EXCLUDES(mu_);
  // The node's RAM is gone: so is its on-demand step.
  void ForgetStep() EXCLUDES(mu_);

  // This node's on-demand step (kNoSyncStep if none) and when it was decided.
  int64_t step() const EXCLUDES(mu_);
  SteadyClock::time_point decided_at() const EXCLUDES(mu_);

  // Tells the coordinator of a maintenance notice from `origin`; retried by
  // the notice thread until heard (held while there is no job yet).
  void PostNotice(const std::string& origin) EXCLUDES(mu_);
  // No notice is waiting to be heard (or there is no job to tell).
  bool NoticeHeard() const EXCLUDES(mu_);

  // Publishes the step the coordinator decided (from the sync call, or with
  // the "go" of a restore round, before any rank can pass it); a decision
  // already taken in is ignored.
  void Apply(const wire::SyncDecision& decision) EXCLUDES(mu_);

  // The ranks registered in the sync map whose process is alive and proven
  // the job's (see above): (slot, pid).
  std::vector<std::pair<int, int64_t>> LiveRanks() const EXCLUDES(ranks_mu_);
  // Sends `sig` to the rank LiveRanks returned as (slot, pid), through its
  // pidfd; false if it is gone (or was never a rank).
  bool SignalRank(int slot, int64_t pid, int sig) const EXCLUDES(ranks_mu_);
  // Whether that rank's process still runs.
  bool RankAlive(int slot, int64_t pid) const EXCLUDES(ranks_mu_);
  // The same as `strata status` shows them.
  std::vector<wire::StatusReply::Rank> RankStatus() const;
  // Host memory the ranks here stage their saves in: {page-locked, not}.
  std::pair<uint64_t, uint64_t> StagingBytes() const;
  // The newest step a rank here checked (-1 if none).
  int64_t node_step() const { return node_step_.load(); }

 private:
  // A process proven to be a rank of the job, pinned by a pidfd.
  struct Registered {
    int64_t pid = 0;
    std::shared_ptr<const PinnedProcess> process;
  };
  OnDemandSync(SyncMap map, gid_t group, net::Trust trust, SteadyClock* clock, Hooks hooks);
  // The registered process of `slot` if it holds `pid` and lives; else
  // pins and checks `pid` (logging a refusal once). Null if not a rank.
  std::shared_ptr<const PinnedProcess> Rank(int slot, int64_t pid) const REQUIRES(ranks_mu_);
  bool Stopping() const { return stopped_.load() || hooks_.stopping(); }
  void NoticeMain();
  void SyncMain();
  void Withdraw(const char* why) REQUIRES(mu_);
  // No rank registered at publication still has to save the published step.
  bool RanksDone() const REQUIRES(mu_);

  SyncMap map_;
  const gid_t group_;  // the job's: its ranks are in it
  const net::Trust trust_;
  SteadyClock* const clock_;
  const Hooks hooks_;
  std::atomic<bool> stopped_{false};
  std::thread notice_thread_;
  std::thread sync_thread_;
  std::atomic<int64_t> node_step_{-1};  // newest step a rank here checked
  std::atomic<double> node_rate_{0};    // its steps per second

  mutable Mutex ranks_mu_;                                              // taken alone
  mutable std::map<int, Registered> registered_ GUARDED_BY(ranks_mu_);  // by slot
  mutable std::map<int, int64_t> refused_ GUARDED_BY(ranks_mu_);        // slot -> pid

  Mutex socket_mu_;                                       // taken alone
  net::Socket* socket_ GUARDED_BY(socket_mu_) = nullptr;  // the sync call's

  mutable Mutex mu_;
  std::optional<Job> job_ GUARDED_BY(mu_);           // set once registered
  int64_t published_ GUARDED_BY(mu_) = kNoSyncStep;  // in the sync map
  uint64_t generation_ GUARDED_BY(mu_) = 0;          // the coordinator's, taken in
  std::vector<int64_t> pids_ GUARDED_BY(mu_);        // live at publication
  // This node's on-demand step: unlike the publication it outlives the ranks.
  int64_t step_ GUARDED_BY(mu_) = kNoSyncStep;
  SteadyClock::time_point decided_at_ GUARDED_BY(mu_){};
  std::string notice_unsent_ GUARDED_BY(mu_);  // origin of an unheard notice
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_ONDEMAND_SYNC_H_
