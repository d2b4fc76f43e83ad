// Copyright 2026 The Strata Authors.
//
// The node's part in backups (docs/backup.md), a component of the agent with
// its own state, lock and thread: it uploads this node's part of each backup
// the coordinator begins (below the trainer's CPU priority), checks that it
// landed and reports it; for a restore it fetches a part back into the
// store, where Adopt verifies every byte against the part's checksums. It
// never modifies or deletes a backup.
//
// The agent hands it what each coordinator reply says about backups, typed
// (OnNews), and asks it which steps to keep from garbage collection (Pins).
//
// Threads and locks: one upload thread of its own; every method may be
// called from any thread, also with the caller's own lock held; NodeBackup
// never calls out (its hooks) with its lock held. A task's step is pinned
// before the watermark can pass it because Replication hands the reply's
// news over (OnNews) before it applies the watermark the reply carries.
#ifndef STRATA_AGENT_NODE_NODE_BACKUP_H_
#define STRATA_AGENT_NODE_NODE_BACKUP_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "agent/config/config.h"
#include "agent/rpc/client.h"
#include "agent/store/store.h"
#include "storage/object_store.h"
#include "strata/env.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "wire/control.h"
#include "wire/coordination.h"

namespace strata::agent {

// Part key.rank of backup `id`: step key.step of that node rank.
struct BackupTask {
  std::string id;
  wire::StepKey key;
  friend bool operator==(const BackupTask&, const BackupTask&) = default;
};

// What a coordinator's reply to a replication report says about backups.
struct BackupNews {
  std::optional<wire::ReplicatedReply::Backup> newest;  // the newest committed backup
  std::string job_error;           // the job's last backup failure, as the coordinator saw it
  std::optional<BackupTask> task;  // this node's part to upload
  // The backup fields of the reply to a report of `job` (of `nodes` nodes).
  // INVALID_ARGUMENT for a part outside the job.
  static StatusOr<BackupNews> From(const wire::ReplicatedReply& reply, const std::string& job,
                                   int nodes);
  // The same from the reply's JSON; INVALID_ARGUMENT also when malformed.
  static StatusOr<BackupNews> FromReply(const json& reply, const std::string& job, int nodes);
};

// Tells the coordinator of `job` how the upload of `task` ended. True when
// it heard (or refused for good: reporting again would not help).
// `step_gone`: it failed because this node no longer holds the step.
bool ReportBackupPart(const CoordinatorCall& call, const ReplicatorConfig& job,
                      const BackupTask& task, const Status& status, uint64_t bytes = 0,
                      uint64_t digest = 0, bool step_gone = false);

class NodeBackup {
 public:
  struct Hooks {
    // The job this node serves now, if any: reports go to its coordinator.
    std::function<std::optional<ReplicatorConfig>()> current_job;
    CoordinatorCall call_coordinator;
    // Waits (bounded) while the job's on-demand step is not yet on the
    // peers: that copy is the one a lost node needs first.
    std::function<void()> yield_to_ondemand;
    // Whether the agent winds down (uploads stop between files).
    std::function<bool()> stopping;
  };

  // Opens the backup store of config.backup_url (which must be set); files
  // go through `env`; the access recheck and upload times read `clock`.
  // Start() starts the upload thread.
  static StatusOr<std::unique_ptr<NodeBackup>> Open(const AgentConfig& config, Store* store,
                                                    Env* env, Hooks hooks,
                                                    SteadyClock* clock = SteadyClock::Real());
  ~NodeBackup();  // Stop()
  NodeBackup(const NodeBackup&) = delete;
  NodeBackup& operator=(const NodeBackup&) = delete;

  void Start();
  // Ends the upload thread (an upload in progress stops between files).
  void Stop();

  storage::ObjectStore* store() const { return store_.get(); }
  // Takes a coordinator's news: the task's step is pinned from here on,
  // until its upload is reported; a task done but not yet heard of is
  // reported again; pins of tasks no longer asked for are released.
  void OnNews(BackupNews news) EXCLUDES(mu_);
  // Steps that garbage collection must keep.
  std::set<wire::StepKey> Pins() const EXCLUDES(mu_);
  void DropPins() EXCLUDES(mu_);  // the node's RAM is gone
  // Downloads part key.rank of backup `id` into the store as `key`; the
  // part must be the copy with `digest`.
  Status FetchPart(const std::string& id, const wire::StepKey& key, uint64_t digest);
  // "ok", "not checked yet" or why the store cannot be used.
  std::string access() const EXCLUDES(mu_);
  // The "backup" part of `strata status`.
  wire::BackupStatus StatusReport() const EXCLUDES(mu_);

 private:
  // An upload that finished, kept until the coordinator heard of it.
  struct UploadResult {
    BackupTask task;
    Status status;
    uint64_t bytes = 0, digest = 0;
    bool step_gone = false;  // failed: the step was collected before the task came
  };

  NodeBackup(std::unique_ptr<storage::ObjectStore> object_store, Store* store, Env* env,
             Hooks hooks, SteadyClock* clock);
  bool Stopping() const { return stopped_.load() || hooks_.stopping(); }
  void Main();
  void CheckAccess() EXCLUDES(mu_);
  // The next thing to do: a result to report again, or a task to upload.
  std::optional<UploadResult> NextRereport() EXCLUDES(mu_);
  std::optional<UploadResult> UploadCurrent() EXCLUDES(mu_);
  // Uploads the task's part; fills `result`'s bytes and digest, or its
  // step_gone when the local store no longer holds the step.
  Status UploadPart(const BackupTask& task, UploadResult* result);
  void Reported(const UploadResult& result) EXCLUDES(mu_);

  const std::unique_ptr<storage::ObjectStore> store_;
  Store* const local_;
  Env* const env_;
  SteadyClock* const clock_;
  const Hooks hooks_;
  std::atomic<bool> stopped_{false};
  std::thread thread_;

  mutable Mutex mu_;
  CondVar cv_;
  std::optional<BackupTask> task_ GUARDED_BY(mu_);          // next part to upload
  std::optional<BackupTask> current_ GUARDED_BY(mu_);       // being uploaded
  std::optional<UploadResult> unreported_ GUARDED_BY(mu_);  // done, not yet reported
  bool rereport_ GUARDED_BY(mu_) = false;                   // report it again
  std::set<wire::StepKey> pins_ GUARDED_BY(mu_);            // kept from GC
  std::string access_ GUARDED_BY(mu_) = "not checked yet";  // "ok" or the problem
  std::string error_ GUARDED_BY(mu_);                       // the last failure here
  std::string job_error_ GUARDED_BY(mu_);                   // the coordinator's
  std::optional<wire::ReplicatedReply::Backup> newest_ GUARDED_BY(mu_);
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_NODE_BACKUP_H_
