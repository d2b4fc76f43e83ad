// Copyright 2026 The Strata Authors.
#include "agent/metrics/agent_metrics.h"

#include <vector>

namespace strata::agent::metric {

namespace {

metrics::Registry& R() { return metrics::Default(); }

// Step distances: 0 (the notice's own step) to thousands.
const std::vector<double> kStepBuckets = {0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};

}  // namespace

metrics::Histogram& LocalCommitSeconds() {
  static auto& h = R().GetHistogram("strata_local_commit_seconds",
                                    "Ingest of a saved step into the agent's store (the local "
                                    "commit: checksums and index)",
                                    metrics::kDurationBuckets);
  return h;
}

metrics::Counter& LocalCommitBytes() {
  static auto& c = R().GetCounter("strata_local_commit_bytes_total", "Bytes of the steps ingested");
  return c;
}

metrics::Histogram& ReplicationSeconds(const std::string& peer) {
  return R().GetHistogram("strata_replication_seconds",
                          "A step sent to a peer, from the offer to its commit there",
                          metrics::kDurationBuckets, {{"peer", peer}});
}

metrics::Counter& ReplicationBytes(const std::string& peer) {
  return R().GetCounter("strata_replication_bytes_total", "Bytes of steps sent to peers",
                        {{"peer", peer}});
}

metrics::Counter& ReplicationDedupBytes(const std::string& peer) {
  return R().GetCounter("strata_replication_dedup_bytes_total",
                        "Bytes of steps replicated to peers that the peer took from steps it "
                        "held (by content) instead of receiving them",
                        {{"peer", peer}});
}

metrics::Counter& ReplicationFailures(const std::string& peer) {
  return R().GetCounter("strata_replication_failures_total",
                        "Sends of a step to a peer that failed (each is retried)",
                        {{"peer", peer}});
}

metrics::Counter& SkippedSteps(std::string_view tier) {
  return R().GetCounter("strata_skipped_steps_total",
                        "Steps a slower tier let go because saves came faster than it took "
                        "them (peer: own steps a newer one replaced before they were sent; "
                        "backup: points of the cadence passed while a backup uploaded)",
                        {{"tier", std::string(tier)}});
}

metrics::Counter& BackupRequests(std::string_view outcome) {
  return R().GetCounter("strata_backup_requests_total",
                        "Backups a client requested (_BACKUP_REQUESTED), by outcome",
                        {{"outcome", std::string(outcome)}});
}

metrics::Histogram& BackupSeconds() {
  static auto& h = R().GetHistogram(
      "strata_backup_seconds", "Upload of this node's part of a backup", metrics::kDurationBuckets);
  return h;
}

metrics::Counter& BackupBytes() {
  static auto& c = R().GetCounter("strata_backup_bytes_total", "Bytes of backup parts uploaded");
  return c;
}

metrics::Counter& BackupFailures() {
  static auto& c =
      R().GetCounter("strata_backup_failures_total", "Uploads of a backup part that failed");
  return c;
}

metrics::Histogram& RestoreSeconds(std::string_view source) {
  return R().GetHistogram("strata_restore_seconds",
                          "A restore of this node's step by source tier (own, peer, backup): the "
                          "verification of its own copy, or the fetch that succeeded (not the "
                          "wait for the plan, nor holders that failed before)",
                          metrics::kDurationBuckets, {{"source", std::string(source)}});
}

metrics::Counter& RestoreBytes(std::string_view source) {
  return R().GetCounter("strata_restore_bytes_total", "Bytes restored, by source tier",
                        {{"source", std::string(source)}});
}

metrics::Counter& VerificationFailures(std::string_view where) {
  return R().GetCounter("strata_verification_failures_total",
                        "Data that failed its checksums, by where it was found",
                        {{"where", std::string(where)}});
}

metrics::Counter& OnDemandSaves() {
  static auto& c =
      R().GetCounter("strata_ondemand_saves_total", "On-demand checkpoints agreed after a notice");
  return c;
}

metrics::Histogram& OnDemandStepDistance() {
  static auto& h = R().GetHistogram(
      "strata_ondemand_step_distance",
      "Steps from the newest step the notified node had trained at the notice to the agreed "
      "on-demand step",
      kStepBuckets);
  return h;
}

metrics::Counter& MaintenanceEvents() {
  static auto& c =
      R().GetCounter("strata_maintenance_events_total", "Maintenance events begun on this node");
  return c;
}

metrics::Histogram& CoordinatorRoundSeconds() {
  static auto& h =
      R().GetHistogram("strata_coordinator_round_seconds",
                       "Coordinator: from a start round's first registration to its restore plan",
                       metrics::kDurationBuckets);
  return h;
}

metrics::Counter& Quarantines() {
  static auto& c = R().GetCounter("strata_quarantines_total",
                                  "Steps quarantined at a supervisor's request (coordinator)");
  return c;
}

metrics::Counter& SupervisorRestarts(std::string_view reason) {
  return R().GetCounter("strata_supervisor_restarts_total",
                        "Restarts of the node's training command by strata run --agent",
                        {{"reason", std::string(reason)}});
}

}  // namespace strata::agent::metric
