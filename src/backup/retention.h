// Copyright 2026 The Strata Authors.
//
// Which backups `strata prune` keeps (see docs/backup-retention.md). Pure:
// no I/O, no clock; the caller passes the listing and "now".
//
// Rules, applied to complete backups only:
//   * Each class puts backups into buckets by the UTC time of their id:
//       hourly  (date, hour)       "2026-11-21T04"
//       daily   (date)             "2026-11-21"
//       weekly  (ISO year, week)   "2026-W47"
//       monthly (year, month)      "2026-11"
//       yearly  (year)             "2026"
//     The newest N buckets of a class (buckets that hold a complete backup,
//     not calendar periods counted back from now) each keep one backup: the
//     oldest in the bucket, or the newest with prefer_recent. kAlways keeps
//     one backup in every bucket of the class.
//   * The newest complete backup is always kept.
//   * A backup a client requested (Commit::requested) is always kept.
//   * Every other complete backup is deleted.
// Incomplete backups are kept ("incomplete"), unless delete_incomplete_after
// is set and the backup began more than that long before `now`.
// A backup's time is its id's minute; the id's sequence breaks ties.
#ifndef STRATA_BACKUP_RETENTION_H_
#define STRATA_BACKUP_RETENTION_H_

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backup/layout.h"
#include "strata/status.h"

namespace strata::backup {

struct RetentionPolicy {
  // Keep one backup in every bucket of the class.
  static constexpr int kAlways = -1;
  // Buckets kept per class: 0 = the class is not used, N >= 1, or kAlways.
  int hourly = 0;
  int daily = 0;
  int weekly = 0;
  int monthly = 0;
  int yearly = 0;
  // Keep the newest backup of each bucket instead of the oldest.
  bool prefer_recent = false;
  // Seconds; unset: incomplete backups are never deleted.
  std::optional<int64_t> delete_incomplete_after;
};

// INVALID_ARGUMENT unless at least one class is used or
// delete_incomplete_after is set ("no retention class given"), and every
// count is >= 0 or kAlways. A policy without any class would delete every
// complete backup but the newest; that is far more likely a forgotten flag
// than a wish, so prune refuses it. With delete_incomplete_after alone,
// every complete backup is kept and only old incomplete ones go.
Status ValidateRetentionPolicy(const RetentionPolicy& policy);

struct PruneDecision {
  std::string id;
  bool keep = false;
  // Kept: the classes and buckets that keep it, then "newest" and
  // "requested", e.g. "daily 2026-11-21, weekly 2026-W47, newest"; or
  // "incomplete".
  // Deleted: "not kept by any class" or "incomplete, older than 7d".
  std::string reason;
};

// One decision per backup, in id order (oldest first), whatever the order
// of `backups`. REQUIRES: ValidateRetentionPolicy(policy).ok().
std::vector<PruneDecision> DecidePrune(const std::vector<BackupSummary>& backups,
                                       const RetentionPolicy& policy, std::time_t now);

// "30m", "12h", "7d", "2w" -> seconds (a positive count, one unit, at most
// 100 years); anything else is INVALID_ARGUMENT quoting the text.
StatusOr<int64_t> ParseRetentionDuration(std::string_view text);
// Seconds -> "7d", "12h", "30m" (the largest of d, h, m that divides it).
std::string FormatRetentionDuration(int64_t seconds);

}  // namespace strata::backup

#endif  // STRATA_BACKUP_RETENTION_H_
