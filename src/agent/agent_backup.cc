// Copyright 2026 The Strata Authors.
//
// The agent's part in backups (see docs/backup.md): the backup thread
// uploads this node's part of each backup the coordinator begins, verifies
// that it landed and reports it; restores fetch a part back into the store,
// where Adopt verifies every byte against the part's checksums. The agent
// never modifies or deletes a backup.
#include <unistd.h>

#include <atomic>
#include <thread>

#include "agent/agent.h"
#include "backup/layout.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/priority.h"
#include "wire/op.h"

namespace strata::agent {
namespace {

// While the store is unreachable or refuses us, access is checked this often.
constexpr auto kAccessRecheck = std::chrono::seconds(60);
// Files of a part moved in parallel (each large file is itself multipart).
constexpr size_t kFilesInFlight = 4;

}  // namespace

Status Agent::OpenBackup() {
  if (!config_.backup_url) return Status::Ok();
  storage::StoreOptions options;
  options.upload_bytes_per_second = uint64_t(config_.backup_bandwidth_mib) << 20;
  STRATA_ASSIGN_OR_RETURN(backup_, storage::OpenObjectStore(*config_.backup_url, options));
  // --restore-backup is a rollback for the job's next start, done once: the
  // id restored is remembered in the store's directory, so an agent
  // restarted with the same flag does not roll the job back again.
  const std::string done_file = JoinPath(store_->root(), std::string(kRollbackDoneFile));
  std::optional<std::string> rollback = config_.restore_backup;
  auto done = ReadFileToString(env_, done_file, 4096);
  if (rollback && done.ok() && *done == *rollback) {
    Log()->warn("--restore-backup {}: already restored once; ignored", *rollback);
    rollback.reset();
  }
  coordinator_.EnableBackups(backup_.get(), rollback,
                             [env = env_, done_file](const std::string& id) {
                               Status s = WriteFileAtomic(env, done_file, id);
                               if (!s.ok())
                                 Log()->warn("remembering the rollback to {}: {}", id, s.message());
                             });
  return Status::Ok();
}

wire::Cadence Agent::Cadence(const ReplicatorConfig& c) const {
  wire::Cadence cadence;
  if (!backup_) return cadence;
  cadence.workers_per_node = c.workers_per_node;
  if (c.backup_interval_steps || c.backup_interval_minutes) {
    cadence.backup_interval_steps = c.backup_interval_steps;
    cadence.backup_interval_minutes = c.backup_interval_minutes;
  } else if (config_.backup_interval_steps) {
    cadence.backup_interval_steps = *config_.backup_interval_steps;
  } else if (config_.backup_interval_minutes) {
    cadence.backup_interval_minutes = *config_.backup_interval_minutes;
  }
  return cadence;
}

// Takes what the coordinator's reply to a "replicated" report says about
// backups: the newest committed one, and a part this node must upload. The
// task's step is pinned against garbage collection from here on, until its
// upload is reported. A task already done but not yet heard of is reported
// again; pins of tasks the coordinator no longer asks for are released.
// Throws json::exception on a malformed reply (the caller catches it).
std::optional<Agent::BackupTask> Agent::NoteBackupReply(const json& reply) {
  if (reply.contains("newest_backup") && reply["newest_backup"].is_object()) {
    newest_backup_ = reply["newest_backup"];
  }
  // The job-wide state of backups, as the coordinator sees it.
  auto e = reply.find("backup_error");
  job_backup_error_ = e != reply.end() && e->is_string() ? e->get<std::string>() : "";
  auto t = reply.find("backup_task");
  if (t == reply.end() || !inc_) {
    backup_pins_.clear();
    if (backup_current_) backup_pins_.insert(backup_current_->key);
    if (backup_task_) backup_pins_.insert(backup_task_->key);
    if (backup_unreported_) backup_pins_.insert(backup_unreported_->task.key);
    return std::nullopt;
  }
  const int part = t->at("part").get<int>();
  if (part < 0 || part >= inc_->config.nodes) {
    Log()->warn("ignoring a backup task for part {} of a {}-node job", part, inc_->config.nodes);
    return std::nullopt;
  }
  BackupTask task{t->at("id").get<std::string>(),
                  {inc_->config.job_name, part, t->at("step").get<int64_t>()}};
  if (!backup_) return task;  // refused by the caller
  if (backup_current_ == task || backup_task_ == task) return std::nullopt;  // already on it
  if (backup_unreported_ && backup_unreported_->task == task) {
    backup_rereport_ = true;
  } else {
    backup_task_ = task;
  }
  backup_pins_.insert(task.key);
  cv_.SignalAll();
  return std::nullopt;
}

void Agent::CheckBackupAccess() {
  Status s = backup_->CheckAccess();
  MutexLock l(&mu_);
  if (s.ok()) {
    if (backup_access_ != "ok") Log()->info("backup store {} is usable", backup_->url());
    backup_access_ = "ok";
  } else {
    backup_access_ = s.message();
    Log()->error("backup store: {} (training continues on the in-cluster tiers)", s.message());
  }
}

void Agent::BackupMain() {
  // Below the trainer: uploads only use CPU time nothing else wants.
  // Threads started from here (the store's part uploads) inherit this.
  RunWhenIdle();
  auto next_check = std::chrono::steady_clock::now();
  while (!Stopping()) {
    if (std::chrono::steady_clock::now() >= next_check) {
      CheckBackupAccess();
      MutexLock l(&mu_);
      next_check = backup_access_ == "ok" ? std::chrono::steady_clock::time_point::max()
                                          : std::chrono::steady_clock::now() + kAccessRecheck;
    }
    std::optional<UploadResult> result;
    {
      MutexLock l(&mu_);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (!stopping_.load() && !backup_task_.has_value() && !backup_rereport_ &&
             cv_.WaitUntil(&mu_, until)) {
      }
      if (backup_rereport_ && backup_unreported_) {
        result = backup_unreported_;
      } else if (backup_task_) {
        backup_current_ = std::move(backup_task_);
        backup_task_.reset();
      }
      backup_rereport_ = false;
    }
    if (!result) {
      std::optional<BackupTask> task;
      {
        MutexLock l(&mu_);
        task = backup_current_;
      }
      if (!task) continue;
      result = UploadResult{*task, Status::Ok()};
      const auto began = std::chrono::steady_clock::now();
      result->status = UploadPart(*task, &result->bytes, &result->digest);
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (result->status.ok()) {
        Log()->info("backup {}: uploaded part {} (step {}, {} bytes in {:.1f} s, {:.0f} MB/s)",
                    task->id, task->key.rank, task->key.step, result->bytes, secs,
                    result->bytes / 1e6 / std::max(secs, 1e-3));
      } else {
        Log()->error("backup {}: part {}: {}", task->id, task->key.rank, result->status.message());
      }
      MutexLock l(&mu_);
      backup_current_.reset();
      backup_unreported_ = result;
      if (!result->status.ok()) backup_error_ = result->status.message();
    }
    if (ReportBackupDone(*result)) {
      MutexLock l(&mu_);
      if (backup_unreported_ && backup_unreported_->task == result->task) {
        backup_unreported_.reset();
        if (!(backup_task_ && backup_task_->key == result->task.key))
          backup_pins_.erase(result->task.key);
      }
    }
  }
}

// While the job's on-demand step is not yet on this node's peers, uploads
// wait between files: that copy is the one a lost node needs first. For at
// most a minute after the step was decided: with its peers down, the
// backup is the only other copy there will be.
void Agent::YieldToOnDemandReplication() {
  constexpr auto kLimit = std::chrono::minutes(1);
  MutexLock l(&mu_);
  bool logged = false;
  while (!SyncStepReplicated() && !Stopping() &&
         std::chrono::steady_clock::now() - ondemand_since_ < kLimit) {
    if (!logged)
      Log()->info("backup upload paused: on-demand step {} replicates first", ondemand_step_);
    logged = true;
    cv_.WaitFor(&mu_, std::chrono::milliseconds(50));
  }
}

// Uploads the files of the step, then the part metadata (so a part is
// complete only when its metadata exists), then checks by listing that
// every file arrived with its size. Integrity of the bytes in transit is the
// store's (checksum headers); of the bytes at rest, the part's checksums,
// checked at restore.
Status Agent::UploadPart(const BackupTask& task, uint64_t* bytes, uint64_t* digest) {
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(task.key));
  const std::string dir = store_->StepPath(task.key);
  const int part = task.key.rank;
  STRATA_RETURN_IF_ERROR(
      RunParallel(index.files.size(), kFilesInFlight, [&](size_t i, const auto&) -> Status {
        if (Stopping()) return CancelledError("the agent is stopping");
        YieldToOnDemandReplication();
        const IndexedFile& f = index.files[i];
        return backup_->PutFile(backup::PartDataKey(task.id, part, f.path), JoinPath(dir, f.path));
      }));
  backup::PartMeta meta{task.id,       task.key.job,           part,
                        task.key.step, StepIndexToJson(index), index.total_bytes,
                        index.digest};
  STRATA_RETURN_IF_ERROR(backup_->Put(backup::PartMetaKey(task.id, part), EncodePartMeta(meta)));
  STRATA_ASSIGN_OR_RETURN(auto listed, backup_->List(backup::PartDataPrefix(task.id, part)));
  std::map<std::string, uint64_t> sizes;
  const std::string prefix = backup::PartDataPrefix(task.id, part);
  for (const auto& o : listed) sizes[o.key.substr(prefix.size())] = o.size;
  for (const IndexedFile& f : index.files) {
    auto it = sizes.find(f.path);
    if (it == sizes.end() || it->second != f.size) {
      return DataLossError(backup_->url() + ": " + backup::PartDataKey(task.id, part, f.path) +
                           (it == sizes.end()
                                ? " is missing after upload"
                                : " has " + std::to_string(it->second) +
                                      " bytes after upload, not " + std::to_string(f.size)));
    }
  }
  *bytes = index.total_bytes;
  *digest = index.digest;
  return Status::Ok();
}

bool Agent::ReportBackupDone(const UploadResult& result) {
  std::optional<ReplicatorConfig> c;
  {
    MutexLock l(&mu_);
    if (inc_) c = inc_->config;
  }
  if (!c) return false;
  const BackupTask& task = result.task;
  wire::BackupDoneRequest req;
  req.job = c->job_name;
  req.node = c->node_rank;
  req.id = task.id;
  req.part = task.key.rank;
  req.step = task.key.step;
  req.ok = result.status.ok();
  req.bytes = result.bytes;
  req.digest = result.digest;
  if (!result.status.ok()) req.error = result.status.message();
  auto r = CallCoordinator(*c, req.ToJson(), std::chrono::seconds(60));
  if (!r.ok()) {
    Log()->warn("reporting backup {} part {}: {}", task.id, task.key.rank, r.status().message());
    return r.status().code() ==
           StatusCode::kInvalidArgument;  // refused: reporting again won't help
  }
  return true;
}

// Downloads part key.rank of backup `id` into the store as `key`. Adopt
// checks every file against the part's checksums before the step counts as
// held; a partial download is removed.
Status Agent::FetchFromBackup(const std::string& id, const StepKey& key, uint64_t digest) {
  if (!backup_)
    return FailedPreconditionError("the plan restores from backup " + id +
                                   " but this agent has no --backup");
  const std::string meta_key = backup::PartMetaKey(id, key.rank);
  STRATA_ASSIGN_OR_RETURN(std::string text, backup_->Get(meta_key));
  STRATA_ASSIGN_OR_RETURN(backup::PartMeta meta,
                          backup::DecodePartMeta(text, backup_->url() + "/" + meta_key));
  STRATA_ASSIGN_OR_RETURN(StepIndex index,
                          StepIndexFromJson(meta.index, backup_->url() + "/" + meta_key));
  if (meta.step != key.step || index.digest != digest) {
    return DataLossError(backup_->url() + "/" + meta_key + ": holds step " +
                         std::to_string(meta.step) + " digest " + Hex64(index.digest) +
                         ", the commit promised step " + std::to_string(key.step) + " digest " +
                         Hex64(digest));
  }
  STRATA_ASSIGN_OR_RETURN(std::string dir, store_->NewIncomingDir());
  Status s = RunParallel(index.files.size(), kFilesInFlight, [&](size_t i, const auto&) -> Status {
    const IndexedFile& f = index.files[i];
    const std::string path = JoinPath(dir, f.path);
    STRATA_RETURN_IF_ERROR(CreateDirs(env_, Dirname(path)));
    const std::string object = backup::PartDataKey(id, key.rank, f.path);
    STRATA_ASSIGN_OR_RETURN(uint64_t size, backup_->GetFile(object, path));
    if (size != f.size) {
      return DataLossError(backup_->url() + "/" + object + ": " + std::to_string(size) +
                           " bytes, the part's index says " + std::to_string(f.size));
    }
    return Status::Ok();
  });
  if (s.ok()) s = store_->Adopt(dir, key, index);
  if (!s.ok()) env_->RemoveAll(dir).IgnoreError();
  return s;
}

// A rollback restores an older step: this job's steps above it, in the
// store or being ingested, are from the abandoned run and must not be
// restored (or replicated) again.
void Agent::DiscardAbove(const std::string& job, int64_t step) {
  for (const auto& [key, index] : store_->List()) {
    if (key.job != job || key.step <= step) continue;
    Status s = store_->Remove(key);
    Log()->info("rollback to step {}: removed {}{}", step, key.ToString(),
                s.ok() ? "" : ": " + std::string(s.message()));
  }
}

json Agent::BackupStatusJson() const {
  if (!backup_) return nullptr;
  json j = {{"url", backup_->url()}, {"access", backup_access_}};
  if (backup_current_) {
    j["uploading"] = backup_current_->id + " part " + std::to_string(backup_current_->key.rank);
  }
  if (!backup_error_.empty()) j["last_error"] = backup_error_;
  if (!job_backup_error_.empty()) j["job_error"] = job_backup_error_;
  if (newest_backup_.is_object()) {
    j["newest"] = newest_backup_;
    // The age of the newest committed backup: how much work a loss of the
    // whole cluster would cost now.
    const int64_t created = newest_backup_.value("created", int64_t{0});
    j["backup_lag_seconds"] = std::max<int64_t>(0, std::time(nullptr) - created);
  }
  return j;
}

}  // namespace strata::agent
