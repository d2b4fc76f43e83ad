// Copyright 2026 The Strata Authors.
//
// The coordinator's part in backups: which committed backups the restore
// planner may use, when a backup begins, who uploads which part, and the
// commit object written once every part is in place. See coordinator.h.
#include <algorithm>
#include <tuple>

#include "agent/coordinator/coordinator.h"
#include "agent/metrics/agent_metrics.h"
#include "util/crash_point.h"
#include "util/hash.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

// backup_done's answers (wire::BackupDoneReply).
json AbandonedReply() {
  wire::BackupDoneReply r;
  r.abandoned = true;
  return r.ToJson();
}
json CommittedReply(bool committed, bool committing = false) {
  wire::BackupDoneReply r;
  r.committed = committed;
  r.committing = committing;
  return r.ToJson();
}

// The catalog is re-read at most this often (it is read at every round and
// by every report): one LIST, plus one GET per commit object not seen yet.
constexpr auto kCatalogMaxAge = std::chrono::seconds(10);
// After a failed backup, the next attempt waits this long.
constexpr std::time_t kRetryAfterFailure = 30;
// A backup still uploading after this long is abandoned (it stays
// incomplete) so that backups resume.
constexpr std::time_t kInFlightLimit = 6 * 3600;
// Rollback records: <prefix>/<job>/<UTC seconds>, JSON {job, id, step,
// time, superseded: [backup ids]}.
constexpr std::string_view kRollbackPrefix = "strata.rollbacks/";

// What one listing of the store says.
struct Listing {
  std::set<backup::BackupId> ids;
  std::set<backup::BackupId> committed;  // ids with a commit object
  std::vector<std::string> rollback_keys;
};

StatusOr<Listing> ListStore(storage::ObjectStore& store) {
  STRATA_ASSIGN_OR_RETURN(auto objects, store.List(""));
  Listing out;
  for (const auto& o : objects) {
    if (o.key.starts_with(kRollbackPrefix)) {
      out.rollback_keys.push_back(o.key);
      continue;
    }
    const std::optional<std::string> id = backup::BackupIdOfKey(o.key);
    if (!id) continue;
    const backup::BackupId parsed = *backup::ParseBackupId(*id);
    out.ids.insert(parsed);
    if (o.key == backup::CommitKey(*id)) out.committed.insert(parsed);
  }
  return out;
}

// Whether a backup of a job of `c.nodes` nodes serves a job of `nodes`
// with data parallelism `dp`: the same nodes, or replicas as wide (its
// parts are one replica's columns, and a column's part serves each rank of
// that column: more replicas than saved, or fewer).
bool Fits(const backup::Commit& c, int nodes, int dp) {
  auto width = [](int n, int d) { return d > 1 && n % d == 0 ? n / d : n; };
  return c.nodes == nodes || width(c.nodes, c.data_parallelism) == width(nodes, dp);
}

}  // namespace

void Coordinator::EnableBackups(storage::ObjectStore* store,
                                std::optional<std::string> restore_backup,
                                std::function<void(const std::string&)> on_rollback) {
  backup_store_ = store;
  restore_backup_ = std::move(restore_backup);
  on_rollback_ = std::move(on_rollback);
}

// Lists the store without holding a lock, reads only commit objects not
// seen before (they never change), then swaps the result in. Backups pruned
// since the last listing disappear from the catalog. At most every
// kCatalogMaxAge; but with `for_restore`, as long as no listing ever
// succeeded, a call makes an attempt now or waits for the one under way
// (the store retries transient errors), so a restore is not planned
// without the backups merely because an earlier listing failed.
void Coordinator::RefreshCatalog(bool for_restore) {
  std::set<backup::BackupId> known;
  {
    MutexLock l(&catalog_mu_);
    const auto now = clock_->Now();
    const bool fresh_enough =
        catalog_at_ != SteadyClock::time_point{} && now - catalog_at_ < kCatalogMaxAge;
    if (for_restore && !catalog_loaded_) {
      if (refreshing_) {  // share the attempt under way (at most one attempt long)
        while (refreshing_) catalog_cv_.Wait(&catalog_mu_);
        return;
      }
    } else if (refreshing_ || fresh_enough) {
      return;
    }
    refreshing_ = true;
    catalog_at_ = now;
    for (const auto& [id, commit] : commits_) known.insert(id);
  }
  auto listed = ListStore(*backup_store_);
  std::map<backup::BackupId, backup::Commit> fresh;
  std::set<backup::BackupId> superseded;
  if (listed.ok()) {
    for (const auto& id : listed->committed) {
      if (known.count(id)) continue;
      auto commit = backup::ReadCommit(*backup_store_, id.ToString());
      if (commit.ok()) {
        fresh[id] = *commit;
      } else {
        Log()->warn("backup {} is not usable: {}", id.ToString(), commit.status().message());
      }
    }
    for (const auto& key : listed->rollback_keys) {
      auto text = backup_store_->Get(key);
      json j = text.ok() ? json::parse(*text, nullptr, false) : json();
      if (!j.is_object() || !j.contains("superseded") || !j["superseded"].is_array()) {
        Log()->warn("{}/{}: not a rollback record; ignored", backup_store_->url(), key);
        continue;
      }
      for (const auto& id : j["superseded"]) {
        if (!id.is_string()) continue;
        if (auto parsed = backup::ParseBackupId(id.get<std::string>()); parsed.ok())
          superseded.insert(*parsed);
      }
    }
  }
  MutexLock l(&catalog_mu_);
  refreshing_ = false;
  catalog_cv_.SignalAll();
  if (!listed.ok()) {
    catalog_error_ = "reading the backup catalog: " + std::string(listed.status().message());
    Log()->warn("{}", catalog_error_);
    return;
  }
  catalog_error_.clear();
  std::erase_if(commits_, [&](const auto& c) { return !listed->committed.count(c.first); });
  commits_.merge(fresh);
  ids_ = listed->ids;
  superseded_ = std::move(superseded);
  catalog_loaded_ = true;
}

// Offers the planner, for every step of a committed backup of this job (the
// newest backup per step), that backup's parts as copies. Backups a rollback
// superseded (of a later step, existing when it happened) are not offered.
// With the operator's --restore-backup pending, only that backup's step
// counts, and CheckRollbackPlan insists on it.
void Coordinator::AddBackupCopies(const std::string& name, Job& job, Inventory* inv) {
  job.rollback_step.reset();
  if (backup_store_ == nullptr) return;
  MutexLock l(&catalog_mu_);
  std::optional<backup::BackupId> only;
  if (restore_backup_ && !job.backup.rollback_done) {
    auto id = backup::ParseBackupId(*restore_backup_);
    auto c = id.ok() ? commits_.find(*id) : commits_.end();
    if (c == commits_.end() || !Fits(c->second, job.nodes, job.dp)) {
      job.plan_error =
          "--restore-backup " + *restore_backup_ + ": " +
          (c == commits_.end()
               ? "not a complete backup in " + backup_store_->url()
               : "made by a job of " + std::to_string(c->second.nodes) + " nodes, not " +
                     std::to_string(job.nodes) + " or as many per replica");
      return;
    }
    only = *id;
    job.rollback_step = c->second.step;
    Inventory at_step;  // the cluster's copies of that step only
    for (const auto& [rank, by_step] : inv->copies) {
      auto s = by_step.find(c->second.step);
      if (s != by_step.end()) at_step.copies[rank][s->first] = s->second;
    }
    *inv = std::move(at_step);
  }
  for (const auto& [id, commit] : commits_) {  // oldest first: newer ids win
    if (only ? id != *only
             : (commit.job != name || !Fits(commit, job.nodes, job.dp) || superseded_.count(id)))
      continue;
    if (job.plan_backups.count(commit.step)) {
      for (auto& [rank, by_step] : inv->copies) {
        auto s = by_step.find(commit.step);
        if (s == by_step.end()) continue;
        std::erase_if(s->second, [](const Copy& c) { return c.holder == wire::kBackupHolder; });
      }
    }
    job.plan_backups[commit.step] = id.ToString();
    for (const auto& [part, digest] : commit.part_digests) {
      inv->Add(part, commit.step, wire::kBackupHolder, digest);
    }
  }
}

// A restart does not by itself end a backup: its uploaders still hold its
// step (their agents pin it while they upload), and a new round that
// restores that step or a later one can keep it. Dropping it cost the
// eight-node chaos run a whole backup interval (rs(6,2) seed 29): the job
// restarted 0.8 s into a backup, two crash loops then poisoned the restored
// step and the previous backup's, and there was no backup in between to fall
// back to. It is dropped at once only when its parts would not fit the round
// (the job changed shape) or a rollback is pending (it abandons later steps).
void Coordinator::CarryBackupInFlight(const std::string& name, Job& job, int nodes, int dp) {
  std::optional<BackupInFlight>& f = job.backup.in_flight;
  if (!f || f->committing) return;  // a commit being written lands either way
  std::string why;
  if (job.nodes != nodes || job.dp != dp) {
    why = "the job registers as " + std::to_string(nodes) + " node(s), data parallelism " +
          std::to_string(dp);
  } else if (restore_backup_ && !job.backup.rollback_done) {
    why = "the rollback to backup " + *restore_backup_ + " is pending";
  }
  if (why.empty()) {
    f->awaiting_plan = true;
    Log()->info(
        "job {}: backup {} of step {} goes on into round {} if its plan restores step {} "
        "or later",
        name, f->id, f->step, job.round + 1, f->step);
    return;
  }
  Log()->info("job {}: backup {} of step {} abandoned: {}", name, f->id, f->step, why);
  f.reset();
}

// A carried backup is kept only where the round goes on from its step or a
// later one: below it, its step belongs to a history the job has left (and
// a quarantined step is not worth a backup).
void Coordinator::SettleBackupInFlight(const std::string& name, Job& job) {
  // Requests above the round's step belong to a history the job left.
  const std::optional<int64_t> plan_step = job.plan->step;
  for (auto it = job.backup.requested.begin(); it != job.backup.requested.end();) {
    const int64_t step = (it++)->first;
    if (!plan_step || step > *plan_step) {
      DropRequest(name, job.backup, step,
                  "the job restarted from " +
                      (plan_step ? "step " + std::to_string(*plan_step) : std::string("nothing")));
    }
  }
  std::optional<BackupInFlight>& f = job.backup.in_flight;
  if (!f || !f->awaiting_plan) return;
  f->awaiting_plan = false;
  const std::optional<int64_t> step = job.plan->step;
  const std::string restores = step ? "step " + std::to_string(*step) : "no step";
  if (step && *step >= f->step && !job.quarantined.count(f->step)) {
    Log()->info("job {} round {}: backup {} of step {} goes on (the round restores {})", name,
                job.round, f->id, f->step, restores);
    return;
  }
  if (f->committing) return;  // every part was in before the plan: it lands
  Log()->info("job {} round {}: backup {} of step {} abandoned: the round restores {}{}", name,
              job.round, f->id, f->step, restores,
              job.quarantined.count(f->step) ? " (its step is quarantined)" : "");
  f.reset();
}

// A rollback's plan must restore exactly the backup's step; anything else
// (a part that failed verification, copies that disagree) is an error the
// operator sees, never a silent fallback. REQUIRES: mu_ held.
void Coordinator::CheckRollbackPlan(Job& job) {
  if (!job.rollback_step || !job.plan_error.empty()) return;
  if (job.plan->step != job.rollback_step) {
    job.plan_error = "--restore-backup " + restore_backup_.value_or("") + ": step " +
                     std::to_string(*job.rollback_step) + " cannot be restored for every node (" +
                     job.plan->reason + ")";
  }
}

// Every node restored the operator's backup: record the rollback in the
// store, with the ids of the job's backups of later steps (they are never
// offered again, also not by a restarted coordinator), and tell the agent,
// once.
// REQUIRES: mu_ held.
void Coordinator::RollbackRestored(const std::string& name, Job& job) {
  if (!job.rollback_step || job.backup.rollback_done) return;
  job.backup.rollback_done = true;
  const std::time_t now = now_();
  // The backups of this job the rollback abandons: every one of a later
  // step that exists now (complete or not; an id not listed yet cannot be
  // complete, since a pending rollback drops the backup in flight when its
  // round begins: CarryBackupInFlight).
  json superseded = json::array();
  {
    MutexLock c(&catalog_mu_);
    for (const auto& [id, commit] : commits_) {
      if (commit.job == name && commit.step > *job.rollback_step) {
        superseded.push_back(id.ToString());
        superseded_.insert(id);
      }
    }
  }
  json record = {{"job", name},
                 {"id", restore_backup_.value_or("")},
                 {"step", *job.rollback_step},
                 {"time", static_cast<int64_t>(now)},
                 {"superseded", superseded}};
  const std::string key = std::string(kRollbackPrefix) + name + "/" + std::to_string(now);
  Status s = backup_store_->Put(key, record.dump());
  if (!s.ok()) Log()->error("job {}: recording the rollback: {}", name, s.message());
  // The cadence counts from the restored backup again.
  job.backup.last_step = *job.rollback_step;
  job.backup.last_time = now;
  if (job.backup.newest && job.backup.newest->step > *job.rollback_step) job.backup.newest.reset();
  Log()->info("job {}: rolled back to backup {} (step {})", name, restore_backup_.value_or(""),
              *job.rollback_step);
  if (on_rollback_) on_rollback_(restore_backup_.value_or(""));
}

// Takes the cadence and worker count a node reports; reports without a
// cadence (e.g. from an agent without --backup) leave it as it is.
void Coordinator::NoteCadence(const wire::Cadence& cadence, Job& job) {
  if (cadence.backup_interval_steps || cadence.backup_interval_minutes) {
    job.backup.interval_steps = cadence.backup_interval_steps;
    job.backup.interval_minutes = cadence.backup_interval_minutes;
  }
  if (cadence.workers_per_node) job.backup.workers_per_node = *cadence.workers_per_node;
  if (job.backup.last_time == 0) job.backup.last_time = now_();
}

// Once per job, after the catalog was read: the newest committed backup in
// the store that the cadence made (not one a client requested) sets where
// the cadence counts from (so a restarted job or coordinator does not back
// up again at once). REQUIRES: mu_ held.
void Coordinator::LearnNewestBackup(const std::string& name, BackupState& b) {
  if (b.learned) return;
  MutexLock c(&catalog_mu_);
  if (!catalog_loaded_) return;
  b.learned = true;
  const backup::Commit* scheduled = nullptr;  // the newest the cadence made
  for (const auto& [id, commit] : commits_) {
    if (commit.job != name) continue;
    b.newest = commit;  // ids ascend in time
    if (!commit.requested) scheduled = &commit;
  }
  if (scheduled && scheduled->step >= b.last_step) {
    b.last_step = scheduled->step;
    b.last_time = scheduled->created;
  }
}

void Coordinator::MaybeBeginBackup(const std::string& name, Job& job, int64_t watermark) {
  BackupState& b = job.backup;
  LearnNewestBackup(name, b);
  if (b.in_flight && !b.in_flight->committing && now_() - b.in_flight->began > kInFlightLimit) {
    b.last_error = "backup " + b.in_flight->id + " took longer than " +
                   std::to_string(kInFlightLimit / 3600) + " h; abandoned (it stays incomplete)";
    Log()->error("job {}: {}", name, b.last_error);
    b.in_flight.reset();
  }
  if (!b.learned || b.in_flight || b.starting || now_() < b.retry_after) return;
  // A requested step every node holds goes first, whatever the cadence says.
  for (const auto& [step, holders] : b.requested) {
    if (static_cast<int>(holders.size()) >= job.nodes) return BeginBackup(name, job, step, true);
  }
  if (watermark < 0 || watermark <= b.unheld_step) return;
  bool due = false;
  int64_t skipped = 0;  // points of the cadence passed since the last backup without one
  // Every K steps: when the watermark enters a later multiple of K than the
  // last backup's step (steps K, 2K, ... are backed up when every node
  // replicated them; a step in between when the watermark skipped one).
  if (b.interval_steps) {
    const int64_t k = *b.interval_steps;
    due = watermark / k > b.last_step / k;
    skipped = watermark / k - std::max<int64_t>(b.last_step, 0) / k - 1;
  }
  if (b.interval_minutes) {
    const std::time_t every = std::time_t{60} * *b.interval_minutes;
    due = watermark > b.last_step && now_() - b.last_time >= every;
    skipped = (now_() - b.last_time) / every - 1;
  }
  if (!due) return;
  if (skipped > 0 && b.last_step >= 0)
    metric::SkippedSteps("backup").Add(static_cast<double>(skipped));
  BeginBackup(name, job, watermark, false);
}

void Coordinator::BeginBackup(const std::string& name, Job& job, int64_t step, bool requested) {
  BackupState& b = job.backup;
  // A coordinator that just restarted may pick an id its predecessor is
  // still uploading under (objects land only when complete). That is safe:
  // each node uploads one part at a time, so its new part overwrites its old
  // one before it reports, and a report for another step is refused.
  const std::time_t began = now_();

  // Choose an id no backup in the store has: list that minute's ids (I/O,
  // without mu_), then take the lowest free sequence and reserve it.
  const int64_t round = job.round;
  b.starting = round + 1;
  const std::string minute = backup::BackupId{began - began % 60, 1}.ToString();
  mu_.Unlock();
  auto listed = backup_store_->List(minute);
  std::optional<backup::BackupId> id;
  if (listed.ok()) {
    MutexLock c(&catalog_mu_);
    std::vector<backup::BackupId> taken(ids_.begin(), ids_.end());
    taken.insert(taken.end(), reserved_.begin(), reserved_.end());
    for (const auto& o : *listed) {
      if (auto key_id = backup::BackupIdOfKey(o.key))
        taken.push_back(*backup::ParseBackupId(*key_id));
    }
    id = backup::NewBackupId(began, taken);
    if (std::find(taken.begin(), taken.end(), *id) != taken.end()) id.reset();  // all taken
    if (id) reserved_.insert(*id);
  }
  mu_.Lock();
  if (b.starting != round + 1 || job.round != round) return;  // a new round began meanwhile
  b.starting = 0;
  if (!id) {
    b.last_error = listed.ok() ? "no free backup id in minute " + minute
                               : std::string(listed.status().message());
    b.retry_after = now_() + kRetryAfterFailure;
    Log()->error("job {}: cannot begin a backup: {}", name, b.last_error);
    return;
  }
  BackupInFlight f;
  f.id = id->ToString();
  f.step = step;
  f.began = began;
  f.requested = requested;
  // Part p is node p's checkpoint. With data parallelism D only the first
  // replica's nodes upload; node r restores from part r mod (nodes / D).
  const int width = (job.dp > 1 && job.nodes % job.dp == 0) ? job.nodes / job.dp : job.nodes;
  for (int p = 0; p < width; ++p) f.uploaders[p] = p;
  for (int r = 0; r < job.nodes; ++r) f.sources[r] = r % width;
  Log()->info("job {}: backup {} of step {} begins ({} part(s){})", name, f.id, f.step, width,
              requested ? ", requested by the client" : "");
  b.in_flight = std::move(f);
}

bool Coordinator::RequestedBackupCommitted(const std::string& name, int64_t step) {
  MutexLock c(&catalog_mu_);
  return std::any_of(commits_.begin(), commits_.end(), [&](const auto& entry) {
    const backup::Commit& commit = entry.second;
    return commit.job == name && commit.step == step && commit.requested;
  });
}

void Coordinator::DropRequest(const std::string& name, BackupState& b, int64_t step,
                              const std::string& why) {
  if (!b.requested.erase(step)) return;
  b.last_error = "the requested backup of step " + std::to_string(step) + " is not made: " + why;
  Log()->error("job {}: {}", name, b.last_error);
  metric::BackupRequests("dropped").Add();
}

// Requests come with the reports: any node's request is the step's; a node
// that holds its copy counts toward it, a node that went past the step
// without one ends it.
void Coordinator::NoteRequests(const std::string& name, const wire::ReplicatedRequest& req,
                               Job& job) {
  if (backup_store_ == nullptr) return;  // nothing to back up to: nodes drop their requests
  BackupState& b = job.backup;
  const bool in_flight_requested = b.in_flight && b.in_flight->requested;
  for (int64_t step : req.requested) {
    if (!b.requested.count(step)) {
      if (in_flight_requested && b.in_flight->step == step) continue;
      if (RequestedBackupCommitted(name, step)) continue;      // reported again after a restart
      if (b.requested.size() >= wire::kMaxRequestedBackups) {  // the oldest not uploading
        auto oldest = b.requested.begin();
        if (in_flight_requested && oldest->first == b.in_flight->step) ++oldest;
        DropRequest(name, b, oldest->first,
                    std::to_string(wire::kMaxRequestedBackups) +
                        " newer requests are pending (each keeps a step in every node's RAM)");
      }
      Log()->info("job {}: node {} asks for a backup of step {}", name, req.node, step);
    }
    b.requested[step].insert(req.node);
  }
  for (int64_t step : req.requested_missing) {
    DropRequest(name, b, step,
                "node " + std::to_string(req.node) + " went past it without its copy");
  }
}

wire::ReplicatedReply Coordinator::BackupReply(const Job& job, int node) {
  wire::ReplicatedReply reply;
  const BackupState& b = job.backup;
  if (b.newest) {
    reply.newest_backup = {b.newest->id, b.newest->step, static_cast<int64_t>(b.newest->created),
                           static_cast<int64_t>(b.newest->committed)};
  }
  if (!b.last_error.empty()) {
    reply.backup_error = b.last_error;
  } else {
    MutexLock c(&catalog_mu_);
    reply.backup_error = catalog_error_;
  }
  for (const auto& [step, holders] : b.requested) reply.requested.insert(step);
  if (b.in_flight && b.in_flight->requested) reply.requested.insert(b.in_flight->step);
  if (b.in_flight && !b.in_flight->committing) {
    for (const auto& [part, uploader] : b.in_flight->uploaders) {
      if (uploader == node && !b.in_flight->done.count(part)) {
        reply.backup_task = {b.in_flight->id, b.in_flight->step, part};
      }
    }
  }
  return reply;
}

// A node uploaded (ok) or failed to upload its part. Only the node the part
// was assigned to, for the backup's step, counts. The last part makes this
// call write the commit object; the reply says whether it did.
StatusOr<json> Coordinator::BackupDone(const wire::BackupDoneRequest& req) {
  const std::string& name = req.job;
  MutexLock l(&mu_);
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(name));
  BackupState& b = job->backup;
  const std::string& id = req.id;
  if (!b.in_flight || b.in_flight->id != id) {
    return AbandonedReply();  // a new round began, or it failed elsewhere
  }
  BackupInFlight& f = *b.in_flight;
  const int part = req.part, node = req.node;
  STRATA_RETURN_IF_ERROR(CheckNode(name, *job, part));
  STRATA_RETURN_IF_ERROR(CheckNode(name, *job, node));
  auto uploader = f.uploaders.find(part);
  if (uploader == f.uploaders.end() || uploader->second != node || req.step != f.step) {
    return InvalidArgumentError("backup " + id + ": node " + std::to_string(node) +
                                " reported part " + std::to_string(part) + " of step " +
                                std::to_string(req.step) + ", which is not its task");
  }
  if (f.committing) return CommittedReply(false, /*committing=*/true);
  if (!req.ok && req.step_gone && f.requested) {
    const int64_t step = f.step;
    b.in_flight.reset();
    DropRequest(name, b, step, "node " + std::to_string(node) + " no longer holds it");
    return AbandonedReply();
  }
  if (!req.ok && req.step_gone) {
    // The step rolled off the node between the report that made it the
    // watermark and the task: no store failed, so no wait.
    Log()->warn(
        "job {}: backup {}: node {} no longer holds step {} ({}); a backup of a newer "
        "step begins once every node replicated one",
        name, id, node, f.step, req.error);
    b.unheld_step = std::max(b.unheld_step, f.step);
    b.in_flight.reset();
    return AbandonedReply();
  }
  if (!req.ok) {
    b.last_error = "backup " + id + ": node " + std::to_string(node) + ": " + req.error;
    Log()->error("job {}: {}; it stays incomplete", name, b.last_error);
    b.in_flight.reset();
    b.retry_after = now_() + kRetryAfterFailure;
    return AbandonedReply();
  }
  if (!req.digest) return InvalidArgumentError("backup_done for " + id + " without a digest");
  f.done[part] = {req.bytes, *req.digest};
  if (f.done.size() < f.uploaders.size()) return CommittedReply(false);

  f.committing = true;
  backup::Commit commit;
  commit.id = id;
  commit.job = name;
  commit.step = f.step;
  commit.nodes = job->nodes;
  commit.workers_per_node = b.workers_per_node;
  commit.data_parallelism = job->dp;
  commit.created = f.began;
  commit.sources = f.sources;
  commit.requested = f.requested;
  for (const auto& [p, done] : f.done) {
    commit.part_bytes[p] = done.first;
    commit.part_digests[p] = done.second;
  }
  l.Unlock();
  commit.committed = now_();
  CrashPoint("coordinator_before_commit");
  Status s = WriteCommit(commit);
  l.Lock();
  const bool current = b.in_flight && b.in_flight->id == id;
  if (current) b.in_flight.reset();
  if (!s.ok()) {
    b.last_error = s.message();
    b.retry_after = now_() + kRetryAfterFailure;
    Log()->error("job {}: writing the commit of backup {}: {}", name, id, s.message());
    return CommittedReply(false);
  }
  b.last_error.clear();
  if (!b.newest || commit.step >= b.newest->step) b.newest = commit;
  if (commit.requested) {  // out of the cadence: it counts from its own backups
    b.requested.erase(commit.step);
    metric::BackupRequests("committed").Add();
  } else {
    b.last_step = std::max(b.last_step, commit.step);
    b.last_time = commit.created;
  }
  Log()->info("job {}: backup {} of step {} committed ({} bytes{})", name, id, commit.step,
              commit.TotalBytes(), commit.requested ? ", requested by the client" : "");
  return CommittedReply(true);
}

Status Coordinator::WriteCommit(const backup::Commit& commit) {
  STRATA_RETURN_IF_ERROR(
      backup_store_->Put(backup::CommitKey(commit.id), backup::EncodeCommit(commit)));
  STRATA_ASSIGN_OR_RETURN(backup::BackupId id, backup::ParseBackupId(commit.id));
  MutexLock l(&catalog_mu_);
  commits_[id] = commit;
  ids_.insert(id);
  reserved_.erase(id);
  return Status::Ok();
}

}  // namespace strata::agent
