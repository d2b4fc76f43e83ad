// Copyright 2026 The Strata Authors.
//
// Replication: the node's part in the peer tier, a component of the agent
// with its own state, lock and thread. Both sides of a step transfer live
// here:
//   * sending: the queue of steps the node ingested, sent newest first (the
//     job's on-demand step before everything) to every peer over several
//     streams, retried with backoff; a step on every peer is reported to the
//     coordinator, whose answer carries the job-wide watermark; garbage
//     collection keeps what the job may still restore and drops the rest;
//   * receiving: a peer's put_step (and its put_files streams), verified as
//     it arrives and adopted into the store; get_index and fetch_step, a
//     peer restoring from a copy held here.
//
// Threads and locks: one sending thread of its own; the receiving calls run
// on the server's long-call threads. Every public method may be called from
// any thread, also with the caller's own lock held (the agent holds its lock
// when it queues a step): Replication never calls a hook, does I/O or waits
// on the network with mu_ held (Restored and Stop abort the connections of
// a send in flight under it: non-blocking system calls).
#ifndef STRATA_AGENT_PEER_REPLICATION_H_
#define STRATA_AGENT_PEER_REPLICATION_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/config/config.h"
#include "agent/peer/coded_tier.h"
#include "agent/peer/retention.h"
#include "agent/rpc/client.h"
#include "agent/rpc/transfer.h"
#include "agent/store/local_dir.h"
#include "agent/store/store.h"
#include "net/cancellation.h"
#include "net/endpoint.h"
#include "net/socket.h"
#include "strata/env.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "wire/coordination.h"
#include "wire/data.h"

namespace strata::agent {

class Replication {
 public:
  // Where this node's steps go: the job it serves and its peers.
  struct Target {
    ReplicatorConfig config;
    std::vector<int> peers;
    std::map<int, std::string> addresses;  // node rank -> host:port
    // A coded peer tier's group (its members' addresses are in
    // `addresses`): steps go to it as chunks (CodedTier), not as copies.
    std::optional<ec::Group> group;
  };
  struct Options {
    net::Trust trust;       // the job's secret and TLS, for peers and the coordinator
    std::string local_dir;  // the client directory (its symlinks pin steps)
    int data_streams = 4;   // connections per large step
    // Collection keeps every step from the floor up while the RAM disk is
    // less full than this (retention.h); 0: always bounded.
    double bounded_collection_fill = kBoundedCollectionFill;
  };
  struct Hooks {
    // The current incarnation; none before the first registration.
    std::function<std::optional<Target>()> target;
    // The job's on-demand step (kNoSyncStep if none): it goes first.
    std::function<int64_t()> priority_step;
    CoordinatorCall call_coordinator;
    // The backup cadence a report carries.
    std::function<wire::Cadence(const ReplicatorConfig&)> cadence;
    // Adds to a report what other components tell the coordinator with it
    // (the steps requested for a backup); may be unset.
    std::function<void(const ReplicatorConfig&, wire::ReplicatedRequest*)> fill_report;
    // The coordinator's answer to a report (`sent`), before the watermark
    // it carries is applied (a backup task there pins its step first).
    std::function<void(const ReplicatorConfig&, const wire::ReplicatedRequest& sent,
                       const wire::ReplicatedReply&)>
        on_reply;
    // Steps garbage collection must keep besides the watermark's (backups).
    std::function<std::set<wire::StepKey>()> pins;
    // A peer's copy was adopted into the store.
    std::function<void(const wire::StepKey&, uint64_t digest)> on_replica;
  };
  // The state `strata status` and the health check show.
  struct Progress {
    int64_t watermark = -1;  // the newest step every node has replicated
    int64_t newest_replicated = -1;
    int64_t newest_ingested = -1;
    size_t queued = 0;
    double lag_seconds = 0;  // since the oldest step not yet on every peer was ingested
    // Since the newest ingested step, and the watermark's step, were
    // ingested here; -1 when unknown (none, or too long ago). A step this
    // agent found held when it started counts from its start (it is queued
    // again then); the step a start of the job restored, from that start
    // (Restored) until a newer one is ingested.
    double own_age_seconds = -1;
    double watermark_age_seconds = -1;
    // Per peer address: the age of the newest own step it holds (since that
    // step was ingested here); peers whose step's time is unknown are left out.
    std::vector<std::pair<std::string, double>> peer_lags;
    std::string error;  // the last failure to reach a peer, cleared by a success
  };

  // `coded` (may be null: no coded tier) sends the steps of a target with
  // a group, and collects its parity shards with the steps.
  Replication(Options options, Store* store, Env* env, SteadyClock* clock, Hooks hooks,
              CodedTier* coded = nullptr);
  ~Replication();  // Stop()
  Replication(const Replication&) = delete;
  Replication& operator=(const Replication&) = delete;

  void Start();  // the sending thread
  void Stop();   // ends it; a send in flight ends at once (its connections are aborted)

  // Sending side.
  // A step of this node was ingested (or found held at start): send it.
  // Steps queued behind a newer one are skipped (counted in
  // strata_skipped_steps_total{tier="peer"}): the newest goes first, and
  // saves that come faster than the peers take them leave only the newest,
  // the job's on-demand step and the `backup_requested` ones (a client's
  // _BACKUP_REQUESTED), which no newer step replaces (they go after it). A
  // step collected before every peer had it (a requested one once its
  // backup is committed) counts as skipped too. The queue holds at most
  // kMaxQueued steps besides the requested ones.
  void Enqueue(const wire::StepKey& key, bool backup_requested = false) EXCLUDES(mu_);
  static constexpr size_t kMaxQueued = 16;
  // Collects garbage on the caller's thread (the agent's, after it ingested
  // steps), for the current incarnation, if a send holds the sending thread:
  // that thread collects only between sends, and a send to a slow or
  // stalled peer may take minutes while the client saves on.
  void CollectNow() EXCLUDES(mu_, gc_mu_);
  // A new incarnation, or the RAM is gone: the queue, the watermark and the
  // progress start afresh (until the watermark is learned again, garbage
  // collection keeps the restored step and the newest; retention.h). A send
  // or report in flight goes on, but what it learns (a step replicated, a
  // watermark) is dropped.
  void Forget() EXCLUDES(mu_);
  // A start of the job (after Forget) restored this node's `step`: the RAM
  // tier holds the ranks' state as of now, and its age counts from here
  // until the next step is ingested. A send of another step still in
  // flight ends at once (its connections are aborted): a step of the
  // history the job left, or one below it, held up behind a partition or
  // a slow link, would keep the sending thread, and the links, for as long
  // as half a minute while the new incarnation's saves wait. A send of
  // `step` itself goes on: its chunks complete the restored step's parity.
  void Restored(int64_t step) EXCLUDES(mu_);
  // Only the queue goes (what is held stays, as does the progress).
  void DropQueue() EXCLUDES(mu_);
  // Whether this node's `step` is on every peer.
  bool Replicated(int64_t step) const EXCLUDES(mu_);
  Progress progress() const EXCLUDES(mu_);
  // "Peer replication failing for N s: <error>" once replication has been
  // behind, with an error, for longer than `after`.
  std::optional<std::string> Trouble(std::chrono::seconds after) const EXCLUDES(mu_);

  // Which step a member of a coded group codes next. The group completes a
  // step only when every member has coded that same step; coding its own
  // newest, a member whose saves land a moment after the others', or that
  // codes slower than it saves, picks a step the others skipped, and then
  // none completes and the watermark stops. So a member joins what the
  // others have begun: of `others` (steps other members code, held here),
  // the newest above both `newest_replicated` and `restored` (the step this
  // start restored, complete for the job; the steps below it are a past
  // the job left, and shards the others began for them before the restart
  // are no reason to code them again), unless it is `newest_queued` (coded
  // next anyway). None: the member codes its newest and leads.
  static std::optional<int64_t> StepToJoin(const std::set<int64_t>& others,
                                           int64_t newest_replicated, int64_t restored,
                                           int64_t newest_queued);

  // Receiving side: the long calls a peer makes, with the connection.
  StatusOr<json> HandlePutStep(const wire::PutStepRequest& request, net::Socket& socket);
  StatusOr<json> HandlePutFiles(const wire::PutFilesRequest& request, net::Socket& socket);
  StatusOr<json> HandleFetchStep(const wire::FetchStepRequest& request, net::Socket& socket);
  StatusOr<json> HandleGetIndex(const wire::GetIndexRequest& request);

 private:
  void Main();
  // The next step to send: the on-demand step, else a step of `joinable`
  // (StepToJoin), else the newest queued, else `retry` once `retry_at` has
  // come.
  std::optional<wire::StepKey> Next(const std::optional<wire::StepKey>& retry,
                                    SteadyClock::time_point retry_at, int64_t priority,
                                    const std::vector<wire::StepKey>& joinable) REQUIRES(mu_);
  // This node's steps of the target's job, held here, that the other
  // members of its coded group have begun to code (none without a group).
  std::vector<wire::StepKey> Joinable(const Target& target) const;
  // Sends `key` to every peer; true when all of them hold it.
  // `epoch`: of the turn that chose `key`; results for a past one are
  // dropped. `ticket`: taken with it, cancelled by Restored() or Stop().
  // A failure sets *failed_at to when it was recorded (its retry counts
  // from there).
  using Ticket = net::Cancellation::Ticket;
  bool SendEverywhere(const wire::StepKey& key, const Target& target, uint64_t epoch,
                      const Ticket& ticket, SteadyClock::time_point* failed_at);
  // The copies of `key` to the target's peers, or its chunks to its group;
  // the first failure.
  Status SendCopies(const wire::StepKey& key, const Target& target, uint64_t epoch,
                    const Ticket& ticket);
  Status SendCoded(const wire::StepKey& key, const Target& target, uint64_t epoch,
                   const Ticket& ticket);
  void Counted(const std::string& peer, int64_t step, uint64_t epoch) EXCLUDES(mu_);
  Status SendToPeer(const wire::StepKey& key, const std::string& address, const Ticket& ticket);
  // An authenticated connection to `to` for `key`'s sender, unless `ticket`
  // was cancelled (the connect itself ends within its timeout).
  StatusOr<RpcClient> ConnectFor(const Endpoint& to, const wire::StepKey& key,
                                 const Ticket& ticket);
  Status SendGroups(const Endpoint& to, const wire::StepKey& key, const StepIndex& index,
                    uint64_t transfer, const std::vector<std::vector<size_t>>& groups,
                    const Ticket& ticket);
  Status SendRangeGroups(const Endpoint& to, const wire::StepKey& key, const StepIndex& index,
                         uint64_t transfer, const std::vector<std::vector<wire::FileRange>>& need,
                         const Ticket& ticket);
  // Receiving a put_step into `dir`: whole files, or by content (what this
  // node holds taken, the rest asked for; *taken_bytes says how much it took).
  Status ReceiveFiles(const wire::PutStepRequest& request, net::Socket& socket,
                      const std::string& dir);
  Status ReceiveByContent(const wire::PutStepRequest& request, net::Socket& socket,
                          const std::string& dir, uint64_t* taken_bytes);
  void AwaitOwnStepForDedup(const wire::StepKey& key) EXCLUDES(mu_);
  // Tells the coordinator of `target` that `key` is on every peer; applies
  // the answer.
  void Report(const wire::StepKey& key, const Target& target, uint64_t epoch);
  // Idle: re-reports the newest replicated step (the watermark moves as
  // the other nodes catch up).
  void RefreshWatermark(const Target& target, uint64_t epoch);
  void CollectGarbage(const Target& target) EXCLUDES(mu_, gc_mu_);

  const Options options_;
  const LocalDir local_;  // options_.local_dir: its symlinks pin steps
  Store* const store_;
  Env* const env_;
  SteadyClock* const clock_;
  const Hooks hooks_;
  CodedTier* const coded_;
  TransferTable transfers_;  // multi-stream puts being received
  std::atomic<bool> stopped_{false};
  std::atomic<bool> sending_{false};  // the sending thread is in a send (CollectNow)
  std::thread thread_;

  mutable Mutex mu_;
  CondVar cv_;
  Mutex gc_mu_ ACQUIRED_BEFORE(mu_);  // one collection at a time (CollectNow)
  std::deque<wire::StepKey> queue_ GUARDED_BY(mu_);
  // Queued steps a client asked to back up: never skipped (Enqueue).
  std::set<int64_t> requested_ GUARDED_BY(mu_);
  // Drops queue_'s entries but `keep` and the requested ones, counting them.
  void SkipQueued(const wire::StepKey& keep) REQUIRES(mu_);
  // Counts Forget() calls: a result of a call begun before the last one is
  // for a past incarnation.
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  // The send in flight (one at a time, on the sending thread) and the
  // epoch of the turn that began it.
  struct InFlight {
    wire::StepKey key;
    uint64_t epoch;
  };
  std::optional<InFlight> in_flight_ GUARDED_BY(mu_);
  // Ends the send in flight (Restored, Stop); its ticket is taken with
  // in_flight_, under mu_, and cancelled under mu_.
  net::Cancellation sends_;
  int64_t watermark_ GUARDED_BY(mu_) = -1;
  // The floor of the last collection and the one before it (StepsToKeep's
  // previous_floor), in this epoch.
  int64_t floor_ GUARDED_BY(mu_) = -1;
  int64_t previous_floor_ GUARDED_BY(mu_) = -1;
  // The floor of the last bounded collection that was logged.
  int64_t bounded_floor_ GUARDED_BY(mu_) = std::numeric_limits<int64_t>::min();
  int64_t newest_replicated_ GUARDED_BY(mu_) = -1;
  int64_t newest_ingested_ GUARDED_BY(mu_) = -1;
  // When the steps from the watermark's on were ingested (at most
  // kIngestTimesKept: a day of saves every ten seconds).
  static constexpr size_t kIngestTimesKept = 8640;
  // Seconds since `step` was ingested here; -1 when unknown.
  double IngestAge(int64_t step) const REQUIRES(mu_);
  std::map<int64_t, SteadyClock::time_point> ingested_at_ GUARDED_BY(mu_);
  std::optional<SteadyClock::time_point> restored_at_ GUARDED_BY(mu_);  // Restored()
  // The step this start of the job restored (Restored()): every node holds
  // it, so collection keeps it until the watermark passes it.
  int64_t restored_step_ GUARDED_BY(mu_) = -1;
  // Per peer address, the newest own step sent there in this epoch.
  std::map<std::string, int64_t> peer_newest_ GUARDED_BY(mu_);
  // When the oldest ingested step not yet on every peer was ingested; unset
  // when replication has caught up.
  std::optional<SteadyClock::time_point> behind_since_ GUARDED_BY(mu_);
  std::string error_ GUARDED_BY(mu_);
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_PEER_REPLICATION_H_
