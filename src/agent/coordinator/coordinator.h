// Copyright 2026 The Strata Authors.
//
// Coordinator: the job-wide state served by the agent of node rank 0.
//
// An incarnation of a job is a *round*: every node registers (with its
// address and the verified copies it holds), and once all `nodes` have
// registered the coordinator makes the restore decision (PlanRestore). Nodes
// fetch what they lack and report ready; when every node is ready the round
// says "go" and the nodes create their restore markers. A node that reports
// a copy that failed verification makes the coordinator plan again without
// it. A registration from a node that already belongs to a decided round
// starts the next round (the job restarted).
//
// A call that waits for the other nodes (await_plan, ready, sync) holds no
// thread while it waits: HandleAsync parks it with a completion, and
// whoever changes what it waits for (another node's call, the timer thread
// for deadlines and collection windows) completes it. Its wait is the
// request's "wait_ms" (at most kMaxWait) or the constructor's default;
// callers retry on DEADLINE_EXCEEDED (short waits keep a waiting agent
// responsive to shutdown and to a new replicator.yaml). Every reply and
// every wake-up costs O(1) or O(the caller's own data), never O(nodes),
// except the decisions themselves (a plan, a sync step): a round of N nodes
// costs O(N log N). Thread-safe; one timer thread.
//
// Backups (when EnableBackups gave a store): the restore decision also
// considers the committed backups of the job (their parts are copies held
// by kBackupHolder), so a job that lost every in-cluster copy restores from
// the newest complete backup. The coordinator schedules backups: when a
// node's "replicated" report finds the job due (by its cadence) it begins a
// backup of the job-wide watermark step under a new backup id, and the
// replies to the uploading nodes carry their task. Once every part is
// reported uploaded and verified ("backup_done"), the coordinator writes
// the commit object — last, so a backup interrupted anywhere (a node or the
// coordinator dying) is never restored from. The coordinator never deletes
// or rewrites a backup.
#ifndef STRATA_AGENT_COORDINATOR_COORDINATOR_H_
#define STRATA_AGENT_COORDINATOR_COORDINATOR_H_

#include <chrono>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/plan/planner.h"
#include "agent/rpc/client.h"
#include "backup/layout.h"
#include "storage/object_store.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "wire/coordination.h"
#include "wire/op_table.h"

namespace strata::agent {

class Coordinator {
 public:
  // The longest wait a call may ask for ("wait_ms").
  static constexpr std::chrono::milliseconds kMaxWait{60000};

  // `wait`: how long a parked call waits when it asks for no "wait_ms".
  // Deadlines, collection windows and node progress read `clock` (the
  // timer looks at it every tick while anything waits, so a ManualClock
  // moves them).
  explicit Coordinator(std::chrono::milliseconds wait = std::chrono::seconds(2),
                       SteadyClock* clock = SteadyClock::Real());
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  using Done = std::function<void(StatusOr<json>)>;
  // Answers a coordination call ("register", "await_plan", "ready",
  // "replicated", "backup_done", "node_address", "notice", "sync",
  // "quarantine_step", "add_copies"; NOT_FOUND for other ops) through
  // `done`, exactly once: at once, or for a waiting call once it may
  // return. `done` never runs under the coordinator's lock; it runs on the
  // calling thread, on the thread whose call completed the wait, or on the
  // timer thread (a deadline).
  void HandleAsync(const json& request, Done done);
  // The same, blocking the calling thread until the answer.
  StatusOr<json> Handle(const json& request);
  // Calls parked now (for status and tests).
  size_t waiting() const;

  // Answers every parked call (a plan, the ready barrier, a sync long-poll)
  // UNAVAILABLE, and every later one at once. The owner calls it before it
  // stops whatever delivers the answers (the Server).
  void Shutdown();

  // Makes the coordinator plan with and schedule backups in `store`, which
  // must outlive it. `restore_backup`: at each job's next start, restore
  // exactly that backup id (a rollback); `on_rollback(id)` is called once a
  // job has restored it, so the caller can avoid repeating it. Call before
  // the first Handle.
  void EnableBackups(storage::ObjectStore* store, std::optional<std::string> restore_backup,
                     std::function<void(const std::string&)> on_rollback = {});
  // The wall clock backups are scheduled by (tests replace it). Call before
  // the first Handle.
  void SetWallClock(std::function<std::time_t()> now) { now_ = std::move(now); }

 private:
  struct Member {
    std::string address;
    // The registering agent's id for this start of its client: a register
    // call carrying the member's own id again is a retry, not a new start.
    std::string incarnation;
    bool ready = false;
    bool failed = false;
    ec::Redundancy redundancy;  // the peer tier the node runs
    std::string domain;         // its failure domain ("" : its own)
  };
  // A parked call. `check`, run under mu_, gives its answer once it has one;
  // with `expired` (its deadline passed) it must give one.
  using Check = std::function<std::optional<StatusOr<json>>(bool expired)>;
  struct Waiter {
    Check check;
    SteadyClock::time_point deadline;
    Done done;
  };
  struct Completion {
    Done done;
    StatusOr<json> result;
  };
  // A backup being uploaded.
  struct BackupInFlight {
    std::string id;
    int64_t step = 0;
    std::time_t began = 0;
    std::map<int, int> uploaders;                       // part -> node rank that uploads it
    std::map<int, int> sources;                         // node rank -> part
    std::map<int, std::pair<uint64_t, uint64_t>> done;  // part -> (bytes, digest)
    bool committing = false;                            // the commit object is being written
    bool requested = false;  // a client asked for it (BackupState::requested)
    // Begun in an earlier round: the new round's first plan keeps it (it
    // restores this step or a later one) or drops it (SettleBackupInFlight).
    bool awaiting_plan = false;
  };
  struct BackupState {
    std::optional<int> interval_steps;  // cadence, from the nodes' reports
    std::optional<int> interval_minutes;
    int workers_per_node = 1;
    int64_t last_step = -1;       // step of the newest committed backup (-1: none)
    std::time_t last_time = 0;    // when it began (or the job was learned)
    std::time_t retry_after = 0;  // after a failed backup
    // A backup's step an uploader no longer held (its store collected it
    // before the task came): the next backup begins as soon as the
    // watermark is past it, with no wait. Reset with each round.
    int64_t unheld_step = -1;
    int64_t starting = 0;  // nonzero: the round whose backup is choosing an id
    std::optional<BackupInFlight> in_flight;
    // Steps a client asked to back up (_BACKUP_REQUESTED), not yet backed
    // up, with the nodes that reported holding their copy: once every node
    // does, its backup begins before any the cadence asks for (at most
    // wire::kMaxRequestedBackups; carried into new rounds up to their
    // plan's step).
    std::map<int64_t, std::set<int>> requested;
    std::optional<backup::Commit> newest;  // newest committed backup of the job
    std::string last_error;
    bool learned = false;  // newest / last_* were read from the catalog
    // The operator's --restore-backup is pending for this job until a round
    // restores it.
    bool rollback_done = false;
  };
  // The job's on-demand step (coordinator_sync.cc). A notice from any node
  // starts a collection: every node's agent reports where its ranks are
  // (step and step rate); once all have, or kCollectWindow passed, the
  // coordinator decides the sync step and every agent publishes it.
  struct NodeProgress {
    int64_t step = -1;  // the newest step a rank of the node checked
    double rate = 0;    // steps per second
    SteadyClock::time_point at{};
  };
  struct SyncState {
    uint64_t generation = 0;  // bumped by every decision and withdrawal
    std::optional<int64_t> step;
    int64_t round = 0;  // the round the decision belongs to
    int64_t notice_unix_ms = 0;
    int64_t notice_step = -1;  // the notified node's newest step at the notice
    std::string origin;        // who gave the notice, for logs and status
    uint64_t collect_id = 0;
    bool collecting = false;
    SteadyClock::time_point collect_deadline{};
    std::map<int, NodeProgress> reports;  // this collection's
    std::map<int, NodeProgress> known;    // the newest from each node
  };
  struct Job {
    int nodes = 0;
    int dp = 1;
    int64_t round = 0;
    SteadyClock::time_point round_began{};  // its first registration (for the round's metric)
    int64_t plan_version = 0;               // bumped by every replan
    std::map<int, Member> members;
    Inventory inventory;
    std::set<std::tuple<int, int, int64_t>> excluded;
    std::optional<RestorePlan> plan;
    // A coded peer tier's groups for the round (formed with its first plan
    // from the members' failure domains), and each node's group.
    std::vector<ec::Group> groups;
    std::map<int, size_t> group_of;
    int ready_count = 0;                          // members ready for plan_version
    std::map<int, int64_t> replicated;            // newest fully replicated step per node
    std::map<int64_t, int> replicated_count;      // step -> nodes whose newest it is
    std::map<int64_t, std::string> plan_backups;  // step -> backup id offered to the planner
    std::string plan_error;                       // the plan cannot be made (e.g. bad backup id)
    std::optional<int64_t> rollback_step;  // the plan restores the operator's backup of this step
    BackupState backup;
    SyncState sync;
    // Steps a supervisor found a crash loop on: never restored again.
    std::set<int64_t> quarantined;
    // Learned from a replication report by a coordinator that restarted
    // while the job ran: its ranks train, though nobody registered here.
    bool learned = false;
  };

  // An answer now, or none: the call was parked with its completion.
  using Answer = std::optional<StatusOr<json>>;
  // A handler per coordination call, each with its typed request
  // (wire/coordination.h).
  using Table = wire::OpTable<Answer(Done&)>;
  Table MakeTable();
  // Parses the request and calls its handler.
  Answer Dispatch(const json& req, Done& done);
  StatusOr<json> Register(const wire::RegisterRequest& req);
  // The waiting calls.
  Answer AwaitPlan(const wire::AwaitPlanRequest& req, Done& done);
  Answer Ready(const wire::ReadyRequest& req, Done& done);
  StatusOr<json> Replicated(const wire::ReplicatedRequest& req);
  StatusOr<json> BackupDone(const wire::BackupDoneRequest& req);  // coordinator_backup.cc
  StatusOr<json> NodeAddress(const wire::NodeAddressRequest& req);
  StatusOr<json> Quarantine(const wire::QuarantineStepRequest& req);
  StatusOr<json> AddCopies(const wire::AddCopiesRequest& req);
  // Adds `copies` (and `parity` shards) as held by `node`.
  static void AddInventory(const std::vector<wire::HeldCopy>& copies, int node,
                           Inventory& inventory, const std::vector<wire::HeldParity>& parity = {});
  // Forms the round's coded groups (coordinator_groups.cc) unless formed;
  // an error (members that disagree on the redundancy, too few nodes)
  // becomes the plan's error.
  static Status FormCodedGroups(const std::string& name, Job& job);
  // The plan as node `node` needs it: its own source and the addresses of
  // its holders and of `peers`; all of it for node -1.
  json PlanJson(const Job& job, int node, const std::vector<int>& peers) const;
  // Parks a call of job `name` until `check` answers it (or answers it now).
  // `wait` overrides the coordinator's default wait (at most kMaxWait).
  Answer Park(const std::string& name, std::optional<std::chrono::milliseconds> wait, Check check,
              Done& done) REQUIRES(mu_);
  // Re-checks the calls parked for `name`; the answered ones go to fired_.
  // With `only_expired`, only those whose deadline passed.
  void Wake(const std::string& name, bool only_expired = false) REQUIRES(mu_);
  // Runs the completions the calls so far fired.
  void RunFired() EXCLUDES(mu_);
  void TimerMain() EXCLUDES(mu_);
  void Replan(const std::string& name, Job& job) REQUIRES(mu_);
  // Every node is ready for the round's plan: the rollback is recorded, the
  // restored step counts as replicated and a pending on-demand step is
  // decided, once, before the first "go" is answered.
  void Restored(const std::string& name, Job& job) REQUIRES(mu_);
  // The registered job `name`; with `round`, ABORTED unless it is the
  // job's current round.
  StatusOr<Job*> FindJob(const std::string& name, std::optional<int64_t> round = std::nullopt)
      REQUIRES(mu_);
  // INVALID_ARGUMENT unless `node` is a node of `job`.
  static Status CheckNode(const std::string& name, const Job& job, int node);

  // The on-demand step (coordinator_sync.cc).
  StatusOr<json> Notice(const wire::NoticeRequest& req);
  Answer Sync(const wire::SyncRequest& req, Done& done);
  // Decides the collection in progress once every node reported or its
  // window closed; `now_or_never`: at once, with what is known (the ranks
  // are about to resume from the plan's step).
  void MaybeDecideSync(const std::string& name, Job& job, bool now_or_never = false) REQUIRES(mu_);
  static wire::SyncDecision Decision(const Job& job);
  static json SyncJson(const Job& job) { return Decision(job).ToJson(); }

  // Backups (coordinator_backup.cc).
  // I/O without locks; takes catalog_mu_ briefly.
  void RefreshCatalog(bool for_restore) EXCLUDES(mu_, catalog_mu_);
  void AddBackupCopies(const std::string& name, Job& job, Inventory* inv) REQUIRES(mu_);
  void CheckRollbackPlan(Job& job) REQUIRES(mu_);
  void RollbackRestored(const std::string& name, Job& job) REQUIRES(mu_);
  // At "go" every node holds the plan's step: it counts as each node's
  // newest replicated step (none is lowered), so the watermark is that step
  // at once, and a backup due at it begins with the round's first report
  // instead of a save later.
  void CountRestoredAsReplicated(Job& job) REQUIRES(mu_);
  // `node`'s newest replicated step becomes `step` if newer (never lower).
  void RaiseReplicated(Job& job, int node, int64_t step) REQUIRES(mu_);
  // A new round of `job` (registering with `nodes` and `dp`) begins: the
  // backup in flight goes on into it, awaiting the round's plan, or is dropped.
  void CarryBackupInFlight(const std::string& name, Job& job, int nodes, int dp) REQUIRES(mu_);
  // The round's plan is made: a backup carried into the round goes on if the
  // plan restores its step or a later one, and is dropped otherwise.
  void SettleBackupInFlight(const std::string& name, Job& job) REQUIRES(mu_);
  void NoteCadence(const wire::Cadence& cadence, Job& job) REQUIRES(mu_);
  void LearnNewestBackup(const std::string& name, BackupState& b) REQUIRES(mu_);
  // Begins a backup when `job` is due; drops mu_ for the store's I/O and
  // takes it again (jobs_ entries are never erased, so `job` stays valid).
  void MaybeBeginBackup(const std::string& name, Job& job, int64_t watermark) REQUIRES(mu_);
  // Begins a backup of `step` under a new id (drops mu_ for the store's I/O).
  void BeginBackup(const std::string& name, Job& job, int64_t step, bool requested) REQUIRES(mu_);
  // The steps a node's report says are requested (held there, or gone by
  // there without its copy).
  void NoteRequests(const std::string& name, const wire::ReplicatedRequest& req, Job& job)
      REQUIRES(mu_);
  // Gives up the request for `step`, saying why.
  static void DropRequest(const std::string& name, BackupState& b, int64_t step,
                          const std::string& why);
  // A committed backup a client requested of `step` exists.
  bool RequestedBackupCommitted(const std::string& name, int64_t step) EXCLUDES(catalog_mu_);
  wire::ReplicatedReply BackupReply(const Job& job, int node) REQUIRES(mu_);
  Status WriteCommit(const backup::Commit& commit) EXCLUDES(mu_, catalog_mu_);

  const Table table_;  // built first; then only read
  const std::chrono::milliseconds wait_;
  SteadyClock* const clock_;
  mutable Mutex mu_;
  CondVar timer_cv_;  // a call parked, or shutdown
  std::map<std::string, Job> jobs_ GUARDED_BY(mu_);
  bool shut_down_ GUARDED_BY(mu_) = false;
  std::map<std::string, std::vector<Waiter>> waiters_ GUARDED_BY(mu_);  // by job
  size_t waiting_ GUARDED_BY(mu_) = 0;
  std::vector<Completion> fired_ GUARDED_BY(mu_);  // to run unlocked
  bool waking_ GUARDED_BY(mu_) = false;            // Wake is running
  std::set<std::string> rewake_ GUARDED_BY(mu_);   // woken meanwhile
  std::thread timer_;

  std::function<std::time_t()> now_ = [] { return std::time(nullptr); };
  storage::ObjectStore* backup_store_ = nullptr;
  std::optional<std::string> restore_backup_;
  std::function<void(const std::string&)> on_rollback_;
  Mutex catalog_mu_ ACQUIRED_AFTER(mu_);  // taken alone or after mu_
  // What the store holds: committed backups, every id (complete or not, and
  // ids this coordinator reserved), and the backups rollbacks (an operator's
  // --restore-backup) abandoned.
  std::map<backup::BackupId, backup::Commit> commits_ GUARDED_BY(catalog_mu_);
  std::set<backup::BackupId> ids_ GUARDED_BY(catalog_mu_);
  std::set<backup::BackupId> reserved_ GUARDED_BY(catalog_mu_);
  std::set<backup::BackupId> superseded_ GUARDED_BY(catalog_mu_);  // by rollbacks
  std::string catalog_error_ GUARDED_BY(catalog_mu_);              // why the last listing failed
  bool catalog_loaded_ GUARDED_BY(catalog_mu_) = false;
  bool refreshing_ GUARDED_BY(catalog_mu_) = false;
  CondVar catalog_cv_;  // refreshing_ became false
  SteadyClock::time_point catalog_at_ GUARDED_BY(catalog_mu_){};
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_COORDINATOR_COORDINATOR_H_
