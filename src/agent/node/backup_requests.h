// Copyright 2026 The Strata Authors.
//
// BackupRequests: the steps of the job this node serves that a client asked
// to back up out of the cadence, a component of the agent. A client asks
// with an empty _BACKUP_REQUESTED file in the step's directory (Orbax
// 0.12.10: ReplicatorCheckpointManager.save(..., backup=True)); one rank's
// request is the step's, so the coordinator lists every pending request to
// every node (docs/agent-protocol.md, "Requested backups").
//   * Each replication report carries the requested steps this node holds
//     its own copy of, and those it went past without one (the coordinator
//     then gives the request up instead of waiting for ever).
//   * Garbage collection keeps this node's copy of each until the
//     coordinator no longer lists it: backed up, or given up.
//   * At most wire::kMaxRequestedBackups of this node's own requests are
//     kept: a newer one displaces the oldest (Add says which).
//
// Thread-safe: the agent's main loop adds, the replication thread reports,
// garbage collection reads the pins. No method calls out with its lock held.
#ifndef STRATA_AGENT_NODE_BACKUP_REQUESTS_H_
#define STRATA_AGENT_NODE_BACKUP_REQUESTS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "util/mutex.h"
#include "wire/coordination.h"
#include "wire/vocabulary.h"

namespace strata::agent {

class BackupRequests {
 public:
  // The client of `key.job` asked for a backup of this node's `key.step`
  // (this node serves `key.job` as rank `key.rank`). Returns the step of the
  // request it displaced, if any.
  std::optional<int64_t> Add(const wire::StepKey& key) EXCLUDES(mu_);

  // Fills a report of `job`'s `requested` and `requested_missing`:
  // `held(step)` says whether this node holds its own copy of `step`, and
  // `newest_ingested` is the newest step it took in (a step below it that it
  // does not hold, it never will).
  void FillReport(const std::string& job, const std::function<bool(int64_t)>& held,
                  int64_t newest_ingested, wire::ReplicatedRequest* report) const EXCLUDES(mu_);

  // The coordinator answered `sent` (a report of `sent.job`) with `reply`:
  // its list is the job's pending requests; an own request sent and no
  // longer listed was backed up, or given up.
  void OnReply(const wire::ReplicatedRequest& sent, const wire::ReplicatedReply& reply)
      EXCLUDES(mu_);

  // The copies garbage collection must keep.
  std::set<wire::StepKey> Pins() const EXCLUDES(mu_);

  // A start of `job` restored `step` (-1: nothing) on this node as `rank`:
  // requests of other jobs, and above that step (a history the job left), go.
  void Restored(const std::string& job, int rank, int64_t step) EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::string job_ GUARDED_BY(mu_);
  int rank_ GUARDED_BY(mu_) = 0;
  std::set<int64_t> own_ GUARDED_BY(mu_);     // this node's client's requests
  std::set<int64_t> listed_ GUARDED_BY(mu_);  // the coordinator's last list
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_NODE_BACKUP_REQUESTS_H_
