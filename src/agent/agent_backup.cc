// Copyright 2026 The Strata Authors.
//
// The agent's side of backups: it opens the node's backup component
// (NodeBackup, node_backup.h) and wires it to the coordinator, the job and
// the on-demand step; a rollback's bookkeeping; restores from a backup.
#include "agent/agent.h"
#include "agent/agent_state.h"
#include "agent/node/node_backup.h"
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
  hooks.yield_to_ondemand = [this] { maintenance_->YieldToOnDemandReplication(); };
  hooks.stopping = [this] { return Stopping(); };
  STRATA_ASSIGN_OR_RETURN(backup_,
                          NodeBackup::Open(config_, store_.get(), env_, std::move(hooks), clock_));
  // --restore-backup is a rollback for the job's next start, done once: the
  // id restored is remembered in the store's directory, so an agent
  // restarted with the same flag does not roll the job back again.
  const std::string done_file = JoinPath(store_->root(), std::string(kRollbackDoneFile));
  std::optional<std::string> rollback = config_.restore_backup;
  auto done = ReadFileToString(env_, done_file, 4096);
  StatusOr<std::string> done_id =
      done.ok() ? DecodeRollbackRecord(*done, done_file) : done.status();
  if (rollback && done_id.ok() && *done_id == *rollback) {
    Log()->warn("--restore-backup {}: already restored once; ignored", *rollback);
    rollback.reset();
  }
  coordinator_.EnableBackups(backup_->store(), rollback,
                             [env = env_, done_file](const std::string& id) {
                               Status s = WriteFileAtomic(env, done_file, EncodeRollbackRecord(id));
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

}  // namespace strata::agent
