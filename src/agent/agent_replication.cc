// Copyright 2026 The Strata Authors.
//
// The agent's side of peer replication: it wires the node's Replication
// component (replication.h) to the incarnation, the on-demand step, the
// coordinator and the backups.
#include "agent/agent.h"
#include "util/logging.h"

namespace strata::agent {

void Agent::OpenReplication() {
  Replication::Options options;
  options.trust = trust_;
  options.local_dir = config_.local_dir;
  options.data_streams = config_.data_streams;
  Replication::Hooks hooks;
  hooks.target = [this]() -> std::optional<Replication::Target> {
    MutexLock l(&mu_);
    if (!inc_) return std::nullopt;
    return Replication::Target{inc_->config, inc_->peers, inc_->addresses, inc_->group};
  };
  hooks.priority_step = [this] { return sync_->step(); };
  hooks.call_coordinator = CoordinatorCaller();
  hooks.cadence = [this](const ReplicatorConfig& c) { return Cadence(c); };
  hooks.fill_report = [this](const ReplicatorConfig& c, wire::ReplicatedRequest* report) {
    const int64_t newest = replication_->progress().newest_ingested;
    requests_.FillReport(
        c.job_name,
        [&](int64_t step) {
          return store_->Has({c.job_name, c.node_rank, step});
        },
        newest, report);
  };
  hooks.on_reply = [this](const ReplicatorConfig& c, const wire::ReplicatedRequest& sent,
                          const wire::ReplicatedReply& reply) {
    requests_.OnReply(sent, reply);
    OnReplicatedReply(c, reply);
  };
  hooks.pins = [this] {
    std::set<wire::StepKey> pins = requests_.Pins();
    if (backup_) pins.merge(backup_->Pins());
    return pins;
  };
  hooks.on_replica = [this](const wire::StepKey& key, uint64_t digest) {
    if (restore_ && restore_->active()) ReportNewCopy(key, digest);
  };
  replication_ = std::make_unique<Replication>(std::move(options), store_.get(), env_, clock_,
                                               std::move(hooks), coded_.get());
}

// A backup task pins its step here, before Replication applies the
// watermark the same reply carries.
void Agent::OnReplicatedReply(const ReplicatorConfig& c, const wire::ReplicatedReply& reply) {
  StatusOr<BackupNews> news = BackupNews::From(reply, c.job_name, c.nodes);
  if (!news.ok()) {
    Log()->warn("reply to a replication report: {}", news.status().message());
    news = BackupNews();
  }
  if (backup_) {
    backup_->OnNews(*news);
    return;
  }
  if (!news->task) return;
  // This agent cannot back up: say so, so the backup ends.
  ReportBackupPart(
      CoordinatorCaller(), c, *news->task,
      FailedPreconditionError("node " + std::to_string(c.node_rank) + " has no --backup"));
}

}  // namespace strata::agent
