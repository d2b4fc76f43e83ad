// Copyright 2026 The Strata Authors.
//
// The agent's metrics, named in one place (docs/operations.md lists them).
// Each returns a series of the process's registry (util/metrics.h); the
// gauges computed at scrape time (RAM held, durability lag per tier, ...)
// are the agent's collector (Agent::CollectMetrics).
#ifndef STRATA_AGENT_METRICS_AGENT_METRICS_H_
#define STRATA_AGENT_METRICS_AGENT_METRICS_H_

#include <string>
#include <string_view>

#include "util/metrics.h"

namespace strata::agent::metric {

// A step's ingest into the store (the local commit), and its bytes.
metrics::Histogram& LocalCommitSeconds();
metrics::Counter& LocalCommitBytes();
// A step sent to one peer (transfer and commit there), per peer address.
metrics::Histogram& ReplicationSeconds(const std::string& peer);
metrics::Counter& ReplicationBytes(const std::string& peer);
metrics::Counter& ReplicationDedupBytes(const std::string& peer);
metrics::Counter& ReplicationFailures(const std::string& peer);
// Steps a slower tier let go because saves came faster than it took them,
// by tier: "peer" (own steps never sent, a newer one went instead),
// "backup" (coordinator: points of the cadence passed while a backup was
// still uploading, which got none of their own).
metrics::Counter& SkippedSteps(std::string_view tier);
// Coordinator: backups a client requested (_BACKUP_REQUESTED), by outcome:
// "committed" or "dropped" (the step could not be had, or newer requests
// displaced it).
metrics::Counter& BackupRequests(std::string_view outcome);
// This node's part of a backup uploaded, and its bytes.
metrics::Histogram& BackupSeconds();
metrics::Counter& BackupBytes();
metrics::Counter& BackupFailures();
// A restore of this node's step from `source`: "own", "peer" or "backup".
metrics::Histogram& RestoreSeconds(std::string_view source);
metrics::Counter& RestoreBytes(std::string_view source);
// Data that failed its checksums, by where it was found: "own" (a copy in
// the store), "peer" (bytes received), "backup".
metrics::Counter& VerificationFailures(std::string_view where);
// On-demand checkpoints this node's ranks saved after a notice, and how
// many steps past the notice the agreed step was.
metrics::Counter& OnDemandSaves();
metrics::Histogram& OnDemandStepDistance();
// Maintenance events begun on this node.
metrics::Counter& MaintenanceEvents();
// Coordinator: from a round's first registration to its plan.
metrics::Histogram& CoordinatorRoundSeconds();
// Steps quarantined at a supervisor's request (coordinator).
metrics::Counter& Quarantines();
// Restarts of this node's training command by `strata run --agent`, by
// reason: "failed" (it exited non-zero), "planned" (exit 75 after an
// on-demand checkpoint), "quarantined" (a crash loop; a step was quarantined).
metrics::Counter& SupervisorRestarts(std::string_view reason);

}  // namespace strata::agent::metric

#endif  // STRATA_AGENT_METRICS_AGENT_METRICS_H_
