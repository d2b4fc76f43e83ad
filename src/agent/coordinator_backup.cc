// Copyright 2026 The Strata Authors.
//
// The coordinator's part in backups: which committed backups the restore
// planner may use, when a backup begins, who uploads which part, and the
// commit object written once every part is in place. See coordinator.h.
#include <algorithm>
#include <tuple>

#include "agent/coordinator.h"
#include "util/crash_point.h"
#include "util/hash.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

// The catalog is re-read at most this often (it is read at every round and
// by every report; a LIST and one GET per new commit object).
constexpr auto kCatalogMaxAge = std::chrono::seconds(10);
// After a failed backup, the next attempt waits this long.
constexpr std::time_t kRetryAfterFailure = 30;

std::time_t Now() { return std::time(nullptr); }

}  // namespace

void Coordinator::EnableBackups(storage::ObjectStore* store,
                                std::optional<std::string> restore_backup) {
  backup_store_ = store;
  restore_backup_ = std::move(restore_backup);
}

void Coordinator::RefreshCatalog() {
  std::lock_guard<std::mutex> l(catalog_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (catalog_at_ != std::chrono::steady_clock::time_point{} && now - catalog_at_ < kCatalogMaxAge)
    return;
  catalog_at_ = now;
  auto listed = backup::ListBackups(*backup_store_);
  if (!listed.ok()) {
    Log()->warn("reading the backup catalog: {}", listed.status().message());
    return;
  }
  for (const auto& b : *listed) {
    ids_.insert(b.id_text);
    if (b.complete && b.commit) commits_[b.id_text] = *b.commit;
  }
}

// Offers the planner, for every step of a committed backup of this job (the
// newest backup per step), that backup's parts as copies. With an operator's
// --restore-backup at the job's first plan, only that backup's step counts.
void Coordinator::AddBackupCopies(const std::string& name, Job& job, Inventory* inv) {
  if (backup_store_ == nullptr) return;
  std::lock_guard<std::mutex> l(catalog_mu_);
  std::optional<std::string> only;
  if (restore_backup_ && !job.backup.restore_override_used) {
    only = restore_backup_;
    job.backup.restore_override_used = true;
    auto c = commits_.find(*only);
    if (c == commits_.end() || c->second.nodes != job.nodes) {
      job.plan_error = "backup " + *only + " in " + backup_store_->url() +
                       (c == commits_.end() ? " is not a complete backup"
                                            : " was made by a job of " +
                                                  std::to_string(c->second.nodes) + " nodes");
      return;
    }
    Inventory at_step;  // the cluster's copies of that step only
    for (const auto& [rank, by_step] : inv->copies) {
      auto s = by_step.find(c->second.step);
      if (s != by_step.end()) at_step.copies[rank][s->first] = s->second;
    }
    *inv = std::move(at_step);
  }
  for (const auto& [id, commit] : commits_) {  // oldest first: newer ids win
    if (only ? id != *only : (commit.job != name || commit.nodes != job.nodes)) continue;
    if (job.plan_backups.count(commit.step)) {
      for (auto& [rank, by_step] : inv->copies) {
        auto& copies = by_step[commit.step];
        std::erase_if(copies, [](const Copy& c) { return c.holder == kBackupHolder; });
      }
    }
    job.plan_backups[commit.step] = id;
    for (const auto& [part, digest] : commit.part_digests) {
      inv->Add(part, commit.step, kBackupHolder, digest);
    }
  }
}

// Once per job: the newest committed backup in the store sets where the
// cadence counts from (so a restarted job or coordinator does not back up
// again at once). REQUIRES: mu_ held.
void Coordinator::LearnNewestBackup(const std::string& name, BackupState& b) {
  if (b.learned) return;
  b.learned = true;
  std::lock_guard<std::mutex> c(catalog_mu_);
  for (const auto& [id, commit] : commits_) {
    if (commit.job != name) continue;
    if (!b.newest ||
        std::tie(commit.created, commit.id) > std::tie(b.newest->created, b.newest->id))
      b.newest = commit;
  }
  if (b.newest && b.newest->step >= b.last_step) {
    b.last_step = b.newest->step;
    b.last_time = b.newest->created;
  }
}

void Coordinator::NoteCadence(const json& req, Job& job) {
  auto positive = [&](const char* key) -> std::optional<int> {
    auto it = req.find(key);
    if (it == req.end() || !it->is_number_integer() || it->get<int64_t>() < 1) return std::nullopt;
    return static_cast<int>(std::min<int64_t>(it->get<int64_t>(), INT32_MAX));
  };
  job.backup.interval_steps = positive("backup_interval_steps");
  job.backup.interval_minutes = positive("backup_interval_minutes");
  if (job.backup.last_time == 0) job.backup.last_time = Now();
}

void Coordinator::MaybeBeginBackup(const std::string& name, Job& job, int64_t watermark,
                                   std::unique_lock<std::mutex>& l) {
  BackupState& b = job.backup;
  LearnNewestBackup(name, b);
  if (b.in_flight || b.starting || watermark < 1 || Now() < b.retry_after) return;
  bool due = false;
  // Every K steps: when the watermark enters a later multiple of K than the
  // last backup's step (steps K, 2K, ... are backed up when every node
  // replicated them; a step in between when the watermark skipped one).
  if (b.interval_steps) due = watermark / *b.interval_steps > b.last_step / *b.interval_steps;
  if (b.interval_minutes) {
    due = watermark > b.last_step && Now() - b.last_time >= std::time_t{60} * *b.interval_minutes;
  }
  if (!due) return;

  // Choose an id no backup in the store has: list that minute's ids (I/O,
  // without mu_), then take the lowest free sequence.
  b.starting = true;
  const std::time_t began = Now();
  const std::string minute = backup::BackupId{began - began % 60, 1}.ToString();
  l.unlock();
  std::vector<backup::BackupId> taken;
  auto listed = backup_store_->List(minute);
  {
    std::lock_guard<std::mutex> c(catalog_mu_);
    for (const auto& id : ids_) {
      if (auto p = backup::ParseBackupId(id); p.ok()) taken.push_back(*p);
    }
  }
  if (listed.ok()) {
    for (const auto& o : *listed) {
      auto p = backup::ParseBackupId(o.key.substr(0, o.key.find('/')));
      if (p.ok()) taken.push_back(*p);
    }
  }
  l.lock();
  if (!b.starting) return;  // a new round began meanwhile
  b.starting = false;
  if (!listed.ok()) {
    b.last_error = listed.status().message();
    b.retry_after = Now() + kRetryAfterFailure;
    Log()->error("job {}: cannot begin a backup: {}", name, b.last_error);
    return;
  }
  BackupInFlight f;
  f.id = backup::NewBackupId(began, taken).ToString();
  f.step = watermark;
  f.began = began;
  // Part p is node p's checkpoint. With data parallelism D only the first
  // replica's nodes upload; node r restores from part r mod (nodes / D).
  const int width = (job.dp > 1 && job.nodes % job.dp == 0) ? job.nodes / job.dp : job.nodes;
  for (int p = 0; p < width; ++p) f.uploaders[p] = p;
  for (int r = 0; r < job.nodes; ++r) f.sources[r] = r % width;
  {
    std::lock_guard<std::mutex> c(catalog_mu_);
    ids_.insert(f.id);
  }
  Log()->info("job {}: backup {} of step {} begins ({} part(s))", name, f.id, f.step, width);
  b.last_step = f.step;
  b.last_time = began;
  b.in_flight = std::move(f);
}

json Coordinator::BackupReply(const Job& job, int node) const {
  json reply = json::object();
  const BackupState& b = job.backup;
  if (b.newest) {
    reply["newest_backup"] = {{"id", b.newest->id},
                              {"step", b.newest->step},
                              {"created", static_cast<int64_t>(b.newest->created)},
                              {"committed", static_cast<int64_t>(b.newest->committed)}};
  }
  if (!b.last_error.empty()) reply["backup_error"] = b.last_error;
  if (b.in_flight) {
    for (const auto& [part, uploader] : b.in_flight->uploaders) {
      if (uploader == node && !b.in_flight->done.count(part)) {
        reply["backup_task"] = {
            {"id", b.in_flight->id}, {"step", b.in_flight->step}, {"part", part}};
      }
    }
  }
  return reply;
}

// A node uploaded (ok) or failed to upload its part. The last part makes
// this call write the commit object; the reply says whether it did.
StatusOr<json> Coordinator::BackupDone(const json& req) {
  STRATA_ASSIGN_OR_RETURN(std::string name, JobField(req));
  std::unique_lock<std::mutex> l(mu_);
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req, nullptr));
  BackupState& b = job->backup;
  const std::string id = req.value("id", "");
  if (!b.in_flight || b.in_flight->id != id) {
    return json{{"abandoned", true}};  // a new round began, or it failed elsewhere
  }
  STRATA_ASSIGN_OR_RETURN(int part, IntField(req, "part", 0, job->nodes - 1));
  if (!req.value("ok", false)) {
    b.last_error = "backup " + id + ": node " + std::to_string(req.value("node", -1)) + ": " +
                   req.value("error", std::string("upload failed"));
    Log()->error("job {}: {}; it stays incomplete", name, b.last_error);
    b.in_flight.reset();
    b.retry_after = Now() + kRetryAfterFailure;
    return json{{"abandoned", true}};
  }
  auto digest = ParseHex64(req.value("digest", std::string()));
  if (!digest) return InvalidArgumentError("backup_done for " + id + " without a digest");
  b.in_flight->done[part] = {req.value("bytes", uint64_t{0}), *digest};
  if (b.in_flight->done.size() < b.in_flight->uploaders.size()) return json{{"committed", false}};

  backup::Commit commit;
  commit.id = id;
  commit.job = name;
  commit.step = b.in_flight->step;
  commit.nodes = job->nodes;
  commit.data_parallelism = job->dp;
  commit.created = b.in_flight->began;
  commit.sources = b.in_flight->sources;
  for (const auto& [p, done] : b.in_flight->done) {
    commit.part_bytes[p] = done.first;
    commit.part_digests[p] = done.second;
  }
  l.unlock();
  commit.committed = Now();
  CrashPoint("coordinator_before_commit");
  Status s = WriteCommit(commit);
  l.lock();
  if (!b.in_flight || b.in_flight->id != id) return json{{"committed", s.ok()}};
  b.in_flight.reset();
  if (!s.ok()) {
    b.last_error = s.message();
    b.retry_after = Now() + kRetryAfterFailure;
    Log()->error("job {}: writing the commit of backup {}: {}", name, id, s.message());
    return json{{"committed", false}};
  }
  b.last_error.clear();
  b.newest = commit;
  Log()->info("job {}: backup {} of step {} committed ({} bytes)", name, id, commit.step,
              commit.TotalBytes());
  return json{{"committed", true}};
}

Status Coordinator::WriteCommit(const backup::Commit& commit) {
  STRATA_RETURN_IF_ERROR(
      backup_store_->Put(backup::CommitKey(commit.id), backup::EncodeCommit(commit)));
  std::lock_guard<std::mutex> l(catalog_mu_);
  commits_[commit.id] = commit;
  ids_.insert(commit.id);
  return Status::Ok();
}

}  // namespace strata::agent
