// Copyright 2026 The Strata Authors.
//
// The agent's part in backups (see docs/backup.md): the backup thread
// uploads this node's part of each backup the coordinator begins, verifies
// that it landed and reports it; restores fetch a part back into the store,
// where Adopt verifies every byte against the part's checksums. The agent
// never modifies or deletes a backup.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "agent/agent.h"
#include "backup/layout.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

// While the store is unreachable or refuses us, access is checked this often.
constexpr auto kAccessRecheck = std::chrono::seconds(60);
// Files of a part moved in parallel (each large file is itself multipart).
constexpr size_t kFilesInFlight = 4;
// Uploads run below the trainer's priority.
constexpr int kUploadNice = 10;

// Runs fn(i) for i in [0, n) on up to `threads` threads; the first error wins.
Status ForEachParallel(size_t n, size_t threads, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      Status s = fn(i);
      std::lock_guard<std::mutex> l(mu);
      if (!s.ok() && first.ok()) first = s;
      if (!first.ok()) return;
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(n, threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace

Status Agent::OpenBackup() {
  if (!config_.backup_url) return Status::Ok();
  storage::StoreOptions options;
  options.upload_bytes_per_second = uint64_t(config_.backup_bandwidth_mib) << 20;
  STRATA_ASSIGN_OR_RETURN(backup_, storage::OpenObjectStore(*config_.backup_url, options));
  coordinator_.EnableBackups(backup_.get(), config_.restore_backup);
  return Status::Ok();
}

json Agent::CadenceJson(const ReplicatorConfig& c) const {
  json j = json::object();
  if (!backup_) return j;
  if (c.backup_interval_steps || c.backup_interval_minutes) {
    if (c.backup_interval_steps) j["backup_interval_steps"] = *c.backup_interval_steps;
    if (c.backup_interval_minutes) j["backup_interval_minutes"] = *c.backup_interval_minutes;
  } else if (config_.backup_interval_steps) {
    j["backup_interval_steps"] = *config_.backup_interval_steps;
  } else if (config_.backup_interval_minutes) {
    j["backup_interval_minutes"] = *config_.backup_interval_minutes;
  }
  return j;
}

// Takes what the coordinator's reply to a "replicated" report says about
// backups: the newest committed one, and a part this node must upload (its
// step is pinned against garbage collection from here on).
void Agent::NoteBackupReply(const json& reply) {
  if (reply.contains("newest_backup")) newest_backup_ = reply["newest_backup"];
  auto t = reply.find("backup_task");
  if (t == reply.end() || !inc_) return;
  BackupTask task{t->at("id").get<std::string>(),
                  {inc_->config.job_name, t->at("part").get<int>(), t->at("step").get<int64_t>()}};
  if (backup_pin_ && backup_uploading_.starts_with(task.id + " ")) return;  // already on it
  if (backup_task_ && backup_task_->id == task.id) return;
  backup_task_ = task;
  backup_pin_ = task.key;
  cv_.notify_all();
}

void Agent::CheckBackupAccess() {
  Status s = backup_->CheckAccess();
  std::lock_guard<std::mutex> l(mu_);
  if (s.ok()) {
    if (backup_access_ != "ok") Log()->info("backup store {} is usable", backup_->url());
    backup_access_ = "ok";
  } else {
    backup_access_ = s.message();
    Log()->error("backup store: {} (training continues on the in-cluster tiers)", s.message());
  }
}

void Agent::BackupMain() {
  // Below the trainer: the kernel lets CPU-hungry uploads yield to it.
  // Threads started from here (the store's part uploads) inherit this.
  setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), kUploadNice);
  auto next_check = std::chrono::steady_clock::now();
  while (!Stopping()) {
    if (std::chrono::steady_clock::now() >= next_check) {
      CheckBackupAccess();
      std::lock_guard<std::mutex> l(mu_);
      next_check = backup_access_ == "ok" ? std::chrono::steady_clock::time_point::max()
                                          : std::chrono::steady_clock::now() + kAccessRecheck;
    }
    std::optional<BackupTask> task;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(500),
                   [this] { return stopping_.load() || backup_task_.has_value(); });
      if (!backup_task_) continue;
      task = std::move(backup_task_);
      backup_task_.reset();
      backup_uploading_ = task->id + " part " + std::to_string(task->key.rank);
    }
    uint64_t bytes = 0, digest = 0;
    const auto began = std::chrono::steady_clock::now();
    Status s = UploadPart(*task, &bytes, &digest);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (s.ok()) {
      Log()->info("backup {}: uploaded part {} (step {}, {} bytes in {:.1f} s, {:.0f} MB/s)",
                  task->id, task->key.rank, task->key.step, bytes, secs,
                  bytes / 1e6 / std::max(secs, 1e-3));
    } else {
      Log()->error("backup {}: part {}: {}", task->id, task->key.rank, s.message());
    }
    ReportBackupDone(*task, s, bytes, digest);
    std::lock_guard<std::mutex> l(mu_);
    backup_uploading_.clear();
    if (backup_pin_ == task->key && !backup_task_) backup_pin_.reset();
    if (!s.ok()) backup_error_ = s.message();
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
      ForEachParallel(index.files.size(), kFilesInFlight, [&](size_t i) -> Status {
        if (Stopping()) return CancelledError("the agent is stopping");
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

void Agent::ReportBackupDone(const BackupTask& task, const Status& s, uint64_t bytes,
                             uint64_t digest) {
  std::optional<ReplicatorConfig> c;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (inc_) c = inc_->config;
  }
  if (!c) return;
  json req = {{"op", "backup_done"}, {"job", c->job_name},     {"node", c->node_rank},
              {"id", task.id},       {"part", task.key.rank},  {"ok", s.ok()},
              {"bytes", bytes},      {"digest", Hex64(digest)}};
  if (!s.ok()) req["error"] = s.message();
  auto r = CallCoordinator(*c, req, std::chrono::seconds(60));
  if (!r.ok()) Log()->warn("reporting backup {}: {}", task.id, r.status().message());
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
  Status s = ForEachParallel(index.files.size(), kFilesInFlight, [&](size_t i) -> Status {
    const IndexedFile& f = index.files[i];
    const std::string path = JoinPath(dir, f.path);
    STRATA_RETURN_IF_ERROR(CreateDirs(Env::Default(), Dirname(path)));
    const std::string object = backup::PartDataKey(id, key.rank, f.path);
    STRATA_ASSIGN_OR_RETURN(uint64_t size, backup_->GetFile(object, path));
    if (size != f.size) {
      return DataLossError(backup_->url() + "/" + object + ": " + std::to_string(size) +
                           " bytes, the part's index says " + std::to_string(f.size));
    }
    return Status::Ok();
  });
  if (s.ok()) s = store_->Adopt(dir, key, index);
  if (!s.ok()) Env::Default()->RemoveAll(dir).IgnoreError();
  return s;
}

json Agent::BackupStatusJson() const {
  if (!backup_) return nullptr;
  json j = {{"url", backup_->url()}, {"access", backup_access_}};
  if (!backup_uploading_.empty()) j["uploading"] = backup_uploading_;
  if (!backup_error_.empty()) j["last_error"] = backup_error_;
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
