// Copyright 2026 The Strata Authors.
//
// The agent's side of backups: it opens the node's backup component
// (NodeBackup, node_backup.h) and wires it to the coordinator, the job and
// the on-demand step; a rollback's bookkeeping; restores from a backup.
#include "agent/agent.h"
#include "agent/node_backup.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"

namespace strata::agent {

Status Agent::OpenBackup() {
  if (!config_.backup_url) return Status::Ok();
  NodeBackup::Hooks hooks;
  hooks.current_job = [this]() -> std::optional<ReplicatorConfig> {
    MutexLock l(&mu_);
    if (!inc_) return std::nullopt;
    return inc_->config;
  };
  hooks.call_coordinator = CoordinatorCaller();
  hooks.yield_to_ondemand = [this] { YieldToOnDemandReplication(); };
  hooks.stopping = [this] { return Stopping(); };
  STRATA_ASSIGN_OR_RETURN(backup_, NodeBackup::Open(config_, store_.get(), env_, std::move(hooks)));
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
  coordinator_.EnableBackups(backup_->store(), rollback,
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

// While the job's on-demand step is not yet on this node's peers, uploads
// wait between files: that copy is the one a lost node needs first. For at
// most a minute after the step was decided: with its peers down, the
// backup is the only other copy there will be.
void Agent::YieldToOnDemandReplication() {
  constexpr auto kLimit = std::chrono::minutes(1);
  bool logged = false;
  PollUntil(SteadyClock::time_point::max(), [&] {
    MutexLock l(&mu_);
    if (SyncStepReplicated() || clock_->Now() - sync_->decided_at() >= kLimit) return true;
    if (!logged)
      Log()->info("backup upload paused: on-demand step {} replicates first", sync_->step());
    logged = true;
    return false;
  });
}

// Downloads part key.rank of backup `id` into the store as `key` (verified
// by Adopt before the step counts as held).
Status Agent::FetchFromBackup(const std::string& id, const StepKey& key, uint64_t digest) {
  if (!backup_) {
    return FailedPreconditionError("the plan restores from backup " + id +
                                   " but this agent has no --backup");
  }
  return backup_->FetchPart(id, key, digest);
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

}  // namespace strata::agent
