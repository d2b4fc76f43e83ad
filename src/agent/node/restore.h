// Copyright 2026 The Strata Authors.
//
// Restore: one start of the job's client on this node, from its complete
// replicator.yaml to the restore markers (the protocol's start-up
// handshake), as a state machine:
//
//              registered            a plan (a step, or none)
//   kRegister ----------> kAwaitPlan -----------------------> kGetData
//     ^   ^                 ^   |  |                              |
//     |   |  the call failed|   |  | the plan's own error         | this node's copy
//     |   |  or the round   |   |  v                              | verified, or fetched
//     |   |  was superseded |   | kFailed                         v
//     |   +-----------------+---+                              kReady --go--> kDone
//     |                     ^                                     |   (markers written)
//     |                     +----------------- replan ------------+
//     +------------ any other error, after a backoff -------------+
//
// Any state goes to kCancelled when the agent stops, when a new
// replicator.yaml appears after this one was taken (the client started
// again: this restore is moot), or when the client's supervisor says the
// client ended (ClientEnded: no new yaml yet, but nobody waits for this
// one). The yaml is removed once the first registration is answered;
// clients look for the markers only after that.
//
// Restore reads and writes the store and the client directory through the
// Env they were opened with, reaches the coordinator through a
// CoordinatorCall and peers through the data plane (FetchCopy: several
// streams, verified on arrival), and sleeps its backoffs on `clock`.
//
// Threads: Run blocks the calling thread (the agent's main loop); the
// accessors may be called from any thread. Restore calls its hooks with no
// lock of its own held.
#ifndef STRATA_AGENT_NODE_RESTORE_H_
#define STRATA_AGENT_NODE_RESTORE_H_

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config/config.h"
#include "agent/node/node_backup.h"
#include "agent/peer/coded_tier.h"
#include "agent/peer/retention.h"
#include "agent/rpc/client.h"
#include "agent/store/local_dir.h"
#include "agent/store/store.h"
#include "net/endpoint.h"
#include "strata/env.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "wire/coordination.h"

namespace strata::agent {

class Restore {
 public:
  enum class State { kIdle, kRegister, kAwaitPlan, kGetData, kReady, kDone, kFailed, kCancelled };
  // "registering", "awaiting plan", ... (for logs and `strata status`).
  static std::string_view StateName(State state);

  struct Options {
    net::Trust trust;       // the job's secret and TLS, for peers' data calls
    int data_streams = 1;   // connections per fetch
    Endpoint address;       // this agent's, as peers reach it
    std::string yaml_path;  // the client's replicator.yaml
    std::string domain;     // this node's failure domain, for coded groups
    // The coded peer tier (parity shards to register, decoding); null: a
    // node without one (a plan that decodes fails its fetch).
    CodedTier* coded = nullptr;
    // A fetch or decode into a RAM disk at least this full (a fraction of
    // its size) first removes the steps held above the plan's (MakeRoom);
    // 0 makes room always.
    double make_room_fill = kBoundedCollectionFill;
  };
  struct Hooks {
    CoordinatorCall call_coordinator;
    std::function<bool()> stopping;
    // This node registered in `round` of `job` (may be called again for a
    // later round of the same restore).
    std::function<void(const ReplicatorConfig& job, int64_t round)> on_round;
    // "go" came with the job's on-demand step: it must be published before
    // any rank can pass it, so this runs before the markers are written.
    std::function<void(const wire::SyncDecision&)> on_sync;
    // "go" came: runs just before the markers are written; an error means
    // no markers yet (the restore registers again).
    std::function<Status()> on_go;
    // Runs before this node's first ready report of a plan, before it lists
    // what it holds above the plan's step (removed at "go"): what lands
    // before it returns is on the list, what lands after is not.
    std::function<void()> before_listing;
  };

  // All pointers must outlive the Restore; `backup` may be null (no
  // --backup: a plan that restores from the backup tier fails this node's
  // fetch, and the coordinator plans again without it).
  Restore(Env* env, SteadyClock* clock, Store* store, const LocalDir* local, NodeBackup* backup,
          Options options, Hooks hooks);
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

  // What the start is: the job as the yaml says, this node's peers and the
  // backup cadence it registers with.
  struct Request {
    ReplicatorConfig config;
    std::vector<int> peers;
    wire::Cadence cadence;
    ec::Redundancy redundancy;  // the peer tier this node runs for the job
    // The yaml file this start was read from: removed once registered only
    // while it is still that file (a restarted client's newer yaml stays,
    // and cancels this start). nullopt: whatever yaml is there is removed.
    std::optional<FileIdentity> yaml;
  };
  // Where it ended: the round joined, the addresses the plan gave and, with
  // a coded peer tier, this node's group for the round.
  struct Outcome {
    int64_t round = 0;
    std::map<int, std::string> addresses;  // node rank -> host:port
    std::optional<ec::Group> group;
  };
  // Runs one restore to its end: OK once the markers are written;
  // FAILED_PRECONDITION when the coordinator cannot plan (e.g.
  // --restore-backup names no complete backup: the client must hear it);
  // CANCELLED (see above); the error of a malformed answer to register, or
  // of removing the yaml. Retries everything else with backoff (a malformed
  // plan or ready answer included). One Run at a time.
  StatusOr<Outcome> Run(const Request& request) EXCLUDES(mu_);

  // Between Run's start and its end: copies that arrive meanwhile belong
  // in the round's inventory (add_copies).
  bool active() const { return active_.load(); }

  // The client the Run in progress serves has ended: `strata run --agent`
  // says it restarts the training command. That Run is cancelled at its next
  // state once its yaml is taken (before, the registration goes on: the
  // yaml still on disk may already be the next start's), so it neither joins
  // a new round nor reports ready for a process that is gone. Without this,
  // a rank killed while its node waited for a plan is counted ready, the
  // other nodes are told "go" and train without it, and its next start
  // opens a round they never join. A notice with no Run in progress
  // cancels nothing, not the next Run either. The supervisor reports before
  // it starts the command again; a notice handled after the next Run began
  // (the report timed out, 2 s) would cancel that Run: its client then waits
  // out its restore timeout and starts again.
  void ClientEnded(std::string why) EXCLUDES(mu_);

  struct Summary {
    State state = State::kIdle;
    int64_t round = 0;
    std::string last;   // "step 7 from own store", ... (for status)
    int64_t step = -1;  // the last restore's step, -1 for none
  };
  Summary summary() const EXCLUDES(mu_);

  // The steps of `job` quarantined after a crash loop, as far as this agent
  // knows: those its node asked for and those the plans listed. Every
  // registration carries them, so a coordinator that restarted (and forgot
  // its own list) never restores one again while any node remembers it.
  void NoteQuarantined(const std::string& job, int64_t step) EXCLUDES(mu_);
  std::set<int64_t> Quarantined(const std::string& job) const EXCLUDES(mu_);

  // This node's copies of `job` as a registration reports them: each proven
  // unchanged by its seal or read and verified again; a copy that fails is
  // dropped from the store here, before anyone plans on it.
  std::vector<wire::HeldCopy> Inventory(const std::string& job);

 private:
  struct Attempt;  // one Run's working state (restore.cc)

  State Register(Attempt& a);
  State AwaitPlan(Attempt& a);
  State GetData(Attempt& a);
  State Ready(Attempt& a);
  // Logs `why`, backs off and registers again.
  State Retry(Attempt& a, const Status& why);
  // Sleeps (on the clock) the backoff of the attempt's n-th failure.
  void BackOff(int failures);
  bool Superseded() const;
  Status RemoveTakenYaml(const std::optional<FileIdentity>& taken);
  std::optional<std::string> ClientGone() const EXCLUDES(mu_);
  void Enter(State state, int64_t round) EXCLUDES(mu_);

  Status VerifyOwnCopy(const wire::StepKey& key, int node, std::vector<wire::FailedHolder>* bad);
  void RecordRestore(const char* tier, const wire::StepKey& key, SteadyClock::time_point began);
  Status FetchStep(Attempt& a, const wire::StepKey& key, const wire::Source& source, int* used);
  Status FetchFrom(const std::string& address, const wire::StepKey& key, int node_rank,
                   std::optional<uint64_t> digest);
  // Rebuilds `key` from its coded group as the plan's `source` says.
  Status DecodeStep(Attempt& a, const wire::StepKey& key, const wire::Source& source);
  Status WriteMarkers(const Attempt& a) EXCLUDES(mu_);
  // What this node holds of `job` above `step`: each step copy with its
  // digest, each parity shard with its header (its contributions).
  struct HeldAbove {
    std::map<wire::StepKey, uint64_t> steps;
    std::map<ParityKey, ParityHeader> parity;
  };
  HeldAbove ListAbove(const std::string& job, int64_t step) const;
  // Removes `job`'s steps above `step` from the store and the parity
  // store, and logs what went, after `why`: what `only` lists (a copy
  // while its digest is the one listed, a shard while it holds a
  // contribution listed), else what ListAbove lists now.
  void DiscardAbove(const std::string& job, int64_t step, std::string_view why,
                    const HeldAbove* only = nullptr);
  void MakeRoom(const std::string& job, int64_t step);

  Env* const env_;
  SteadyClock* const clock_;
  Store* const store_;
  const LocalDir* const local_;
  NodeBackup* const backup_;
  const Options options_;
  const Hooks hooks_;
  std::atomic<bool> active_{false};

  mutable Mutex mu_;
  Summary summary_ GUARDED_BY(mu_);
  std::map<std::string, std::set<int64_t>> quarantined_ GUARDED_BY(mu_);  // by job
  // Why the Run in progress must end (ClientEnded); cleared as a Run begins.
  std::optional<std::string> client_ended_ GUARDED_BY(mu_);
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_RESTORE_H_
