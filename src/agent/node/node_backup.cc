// Copyright 2026 The Strata Authors.
#include "agent/node/node_backup.h"

#include <ctime>
#include <map>

#include "agent/metrics/agent_metrics.h"
#include "backup/layout.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/priority.h"
#include "util/thread_pool.h"
#include "wire/coordination.h"

namespace strata::agent {
namespace {

// While the store is unreachable or refuses us, access is checked this often.
constexpr auto kAccessRecheck = std::chrono::seconds(60);
// Files of a part moved in parallel (each large file is itself multipart).
constexpr size_t kFilesInFlight = 4;

}  // namespace

StatusOr<BackupNews> BackupNews::From(const wire::ReplicatedReply& reply, const std::string& job,
                                      int nodes) {
  BackupNews news;
  news.newest = reply.newest_backup;
  news.job_error = reply.backup_error;
  if (!reply.backup_task) return news;
  const wire::ReplicatedReply::Task& t = *reply.backup_task;
  if (t.part >= nodes) {
    return InvalidArgumentError("a backup task for part " + std::to_string(t.part) + " of a " +
                                std::to_string(nodes) + "-node job");
  }
  news.task = BackupTask{t.id, {job, t.part, t.step}};
  return news;
}

StatusOr<BackupNews> BackupNews::FromReply(const json& reply, const std::string& job, int nodes) {
  STRATA_ASSIGN_OR_RETURN(wire::ReplicatedReply typed, wire::ReplicatedReply::FromJson(reply));
  return From(typed, job, nodes);
}

bool ReportBackupPart(const CoordinatorCall& call, const ReplicatorConfig& job,
                      const BackupTask& task, const Status& status, uint64_t bytes, uint64_t digest,
                      bool step_gone) {
  wire::BackupDoneRequest req;
  req.job = job.job_name;
  req.node = job.node_rank;
  req.id = task.id;
  req.part = task.key.rank;
  req.step = task.key.step;
  req.ok = status.ok();
  req.bytes = bytes;
  req.digest = digest;
  if (!status.ok()) req.error = status.message();
  req.step_gone = !status.ok() && step_gone;
  auto r = call(job, req.ToJson(), std::chrono::seconds(60));
  if (!r.ok()) {
    Log()->warn("reporting backup {} part {}: {}", task.id, task.key.rank, r.status().message());
    return r.status().code() == StatusCode::kInvalidArgument;  // refused: again won't help
  }
  return true;
}

StatusOr<std::unique_ptr<NodeBackup>> NodeBackup::Open(const AgentConfig& config, Store* store,
                                                       Env* env, Hooks hooks, SteadyClock* clock) {
  if (!config.backup_url) return InvalidArgumentError("no backup store configured");
  storage::StoreOptions options;
  options.upload_bytes_per_second = uint64_t(config.backup_bandwidth_mib) << 20;
  STRATA_ASSIGN_OR_RETURN(auto object_store, storage::OpenObjectStore(*config.backup_url, options));
  return std::unique_ptr<NodeBackup>(
      new NodeBackup(std::move(object_store), store, env, std::move(hooks), clock));
}

NodeBackup::NodeBackup(std::unique_ptr<storage::ObjectStore> object_store, Store* store, Env* env,
                       Hooks hooks, SteadyClock* clock)
    : store_(std::move(object_store)),
      local_(store),
      env_(env),
      clock_(clock),
      hooks_(std::move(hooks)) {}

NodeBackup::~NodeBackup() { Stop(); }

void NodeBackup::Start() {
  thread_ = std::thread([this] { Main(); });
}

void NodeBackup::Stop() {
  stopped_ = true;
  {
    MutexLock l(&mu_);
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void NodeBackup::OnNews(BackupNews news) {
  MutexLock l(&mu_);
  if (news.newest) newest_ = std::move(news.newest);
  job_error_ = std::move(news.job_error);
  if (!news.task) {
    pins_.clear();
    if (current_) pins_.insert(current_->key);
    if (task_) pins_.insert(task_->key);
    if (unreported_) pins_.insert(unreported_->task.key);
    return;
  }
  const BackupTask& task = *news.task;
  if (current_ == task || task_ == task) return;  // already on it
  if (unreported_ && unreported_->task == task) {
    rereport_ = true;
  } else {
    task_ = task;
  }
  pins_.insert(task.key);
  cv_.SignalAll();
}

std::set<wire::StepKey> NodeBackup::Pins() const {
  MutexLock l(&mu_);
  return pins_;
}

void NodeBackup::DropPins() {
  MutexLock l(&mu_);
  pins_.clear();
}

std::string NodeBackup::access() const {
  MutexLock l(&mu_);
  return access_;
}

void NodeBackup::CheckAccess() {
  Status s = store_->CheckAccess();
  MutexLock l(&mu_);
  if (s.ok()) {
    if (access_ != "ok") Log()->info("backup store {} is usable", store_->url());
    access_ = "ok";
  } else {
    access_ = s.message();
    Log()->error("backup store: {} (training continues on the in-cluster tiers)", s.message());
  }
}

void NodeBackup::Main() {
  // Below the trainer: uploads only use CPU time nothing else wants.
  // Threads started from here (the store's part uploads) inherit this.
  RunWhenIdle();
  auto next_check = clock_->Now();
  while (!Stopping()) {
    if (clock_->Now() >= next_check) {
      CheckAccess();
      next_check =
          access() == "ok" ? SteadyClock::time_point::max() : clock_->Now() + kAccessRecheck;
    }
    std::optional<UploadResult> result = NextRereport();
    if (!result) result = UploadCurrent();
    if (!result) continue;
    std::optional<ReplicatorConfig> job = hooks_.current_job();
    if (job && ReportBackupPart(hooks_.call_coordinator, *job, result->task, result->status,
                                result->bytes, result->digest, result->step_gone)) {
      Reported(*result);
    }
  }
}

std::optional<NodeBackup::UploadResult> NodeBackup::NextRereport() {
  MutexLock l(&mu_);
  // A real-time wait (the condition variable's clock), not a decision.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (!stopped_.load() && !task_.has_value() && !rereport_ && cv_.WaitUntil(&mu_, until)) {
  }
  std::optional<UploadResult> result;
  if (rereport_ && unreported_) {
    result = unreported_;
  } else if (task_) {
    current_ = std::move(task_);
    task_.reset();
  }
  rereport_ = false;
  return result;
}

std::optional<NodeBackup::UploadResult> NodeBackup::UploadCurrent() {
  std::optional<BackupTask> task;
  {
    MutexLock l(&mu_);
    task = current_;
  }
  if (!task) return std::nullopt;
  UploadResult result{*task, Status::Ok()};
  const auto began = clock_->Now();
  result.status = UploadPart(*task, &result);
  const double secs = SecondsSince(*clock_, began);
  if (result.status.ok()) {
    Log()->info("backup {}: uploaded part {} (step {}, {} bytes in {:.1f} s, {:.0f} MB/s)",
                task->id, task->key.rank, task->key.step, result.bytes, secs,
                result.bytes / 1e6 / std::max(secs, 1e-3));
    metric::BackupSeconds().Observe(secs);
    metric::BackupBytes().Add(static_cast<double>(result.bytes));
  } else {
    Log()->error("backup {}: part {}: {}", task->id, task->key.rank, result.status.message());
    metric::BackupFailures().Add();
  }
  MutexLock l(&mu_);
  current_.reset();
  unreported_ = result;
  if (!result.status.ok()) error_ = result.status.message();
  return result;
}

void NodeBackup::Reported(const UploadResult& result) {
  MutexLock l(&mu_);
  if (unreported_ && unreported_->task == result.task) {
    unreported_.reset();
    if (!(task_ && task_->key == result.task.key)) pins_.erase(result.task.key);
  }
}

// Uploads the files of the step, then the part metadata (so a part is
// complete only when its metadata exists), then checks by listing that
// every file arrived with its size. Integrity of the bytes in transit is the
// store's (checksum headers); of the bytes at rest, the part's checksums,
// checked at restore.
Status NodeBackup::UploadPart(const BackupTask& task, UploadResult* result) {
  StatusOr<StepIndex> held = local_->GetIndex(task.key);
  if (!held.ok()) {
    result->step_gone = held.status().code() == StatusCode::kNotFound;
    return held.status();
  }
  const StepIndex& index = *held;
  const std::string dir = local_->StepPath(task.key);
  const int part = task.key.rank;
  STRATA_RETURN_IF_ERROR(
      RunParallel(index.files.size(), kFilesInFlight, [&](size_t i, const auto&) -> Status {
        if (Stopping()) return CancelledError("the agent is stopping");
        hooks_.yield_to_ondemand();
        const IndexedFile& f = index.files[i];
        return store_->PutFile(backup::PartDataKey(task.id, part, f.path), JoinPath(dir, f.path));
      }));
  backup::PartMeta meta{task.id,       task.key.job,           part,
                        task.key.step, StepIndexToJson(index), index.total_bytes,
                        index.digest};
  STRATA_RETURN_IF_ERROR(store_->Put(backup::PartMetaKey(task.id, part), EncodePartMeta(meta)));
  STRATA_ASSIGN_OR_RETURN(auto listed, store_->List(backup::PartDataPrefix(task.id, part)));
  std::map<std::string, uint64_t> sizes;
  const std::string prefix = backup::PartDataPrefix(task.id, part);
  for (const auto& o : listed) sizes[o.key.substr(prefix.size())] = o.size;
  for (const IndexedFile& f : index.files) {
    auto it = sizes.find(f.path);
    if (it == sizes.end() || it->second != f.size) {
      return DataLossError(store_->url() + ": " + backup::PartDataKey(task.id, part, f.path) +
                           (it == sizes.end()
                                ? " is missing after upload"
                                : " has " + std::to_string(it->second) +
                                      " bytes after upload, not " + std::to_string(f.size)));
    }
  }
  result->bytes = index.total_bytes;
  result->digest = index.digest;
  return Status::Ok();
}

// Adopt checks every file against the part's checksums before the step
// counts as held; a partial download is removed.
Status NodeBackup::FetchPart(const std::string& id, const wire::StepKey& key, uint64_t digest) {
  const std::string meta_key = backup::PartMetaKey(id, key.rank);
  STRATA_ASSIGN_OR_RETURN(std::string text, store_->Get(meta_key));
  STRATA_ASSIGN_OR_RETURN(backup::PartMeta meta,
                          backup::DecodePartMeta(text, store_->url() + "/" + meta_key));
  STRATA_ASSIGN_OR_RETURN(StepIndex index,
                          StepIndexFromJson(meta.index, store_->url() + "/" + meta_key));
  if (meta.step != key.step || index.digest != digest) {
    return DataLossError(store_->url() + "/" + meta_key + ": holds step " +
                         std::to_string(meta.step) + " digest " + Hex64(index.digest) +
                         ", the commit promised step " + std::to_string(key.step) + " digest " +
                         Hex64(digest));
  }
  STRATA_ASSIGN_OR_RETURN(std::string dir, local_->NewIncomingDir());
  Status s = RunParallel(index.files.size(), kFilesInFlight, [&](size_t i, const auto&) -> Status {
    const IndexedFile& f = index.files[i];
    const std::string path = JoinPath(dir, f.path);
    STRATA_RETURN_IF_ERROR(CreateDirs(env_, Dirname(path)));
    const std::string object = backup::PartDataKey(id, key.rank, f.path);
    STRATA_ASSIGN_OR_RETURN(uint64_t size, store_->GetFile(object, path));
    if (size != f.size) {
      return DataLossError(store_->url() + "/" + object + ": " + std::to_string(size) +
                           " bytes, the part's index says " + std::to_string(f.size));
    }
    return Status::Ok();
  });
  if (s.ok()) s = local_->Adopt(dir, key, index);
  if (!s.ok()) env_->RemoveAll(dir).IgnoreError();
  return s;
}

wire::BackupStatus NodeBackup::StatusReport() const {
  MutexLock l(&mu_);
  wire::BackupStatus b;
  b.url = store_->url();
  b.access = access_;
  if (current_) b.uploading = current_->id + " part " + std::to_string(current_->key.rank);
  if (!error_.empty()) b.last_error = error_;
  if (!job_error_.empty()) b.job_error = job_error_;
  b.newest = newest_;
  // The age of the newest committed backup: how much work a loss of the
  // whole cluster would cost now.
  if (newest_) b.lag_seconds = std::max<int64_t>(0, std::time(nullptr) - newest_->created);
  return b;
}

}  // namespace strata::agent
