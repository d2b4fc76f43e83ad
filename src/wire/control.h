// Copyright 2026 The Strata Authors.
//
// The control calls' answers as typed structs: `status` (read by `strata
// status` and by `strata run --agent` for its progress) and `health` (read
// by `strata health`). The agent builds them and sends ToJson(); a reader
// parses once with FromJson, INVALID_ARGUMENT naming the call and the field.
#ifndef STRATA_WIRE_CONTROL_H_
#define STRATA_WIRE_CONTROL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "strata/status.h"
#include "wire/coordination.h"

namespace strata::wire {

using json = nlohmann::json;

// The node's part in backups, as NodeBackup sees it.
struct BackupStatus {
  std::string url;
  std::string access;                             // "ok", "not checked yet" or the problem
  std::optional<std::string> uploading;           // "<id> part <rank>"
  std::optional<std::string> last_error;          // the last failure on this node
  std::optional<std::string> job_error;           // the job's, as the coordinator saw it
  std::optional<ReplicatedReply::Backup> newest;  // the newest committed backup
  int64_t lag_seconds = 0;  // its age (with `newest`): the work a cluster loss costs now
  static StatusOr<BackupStatus> FromJson(const json& j);
  json ToJson() const;
};

// status: the agent's job, what it holds, replication, backups, the ranks.
struct StatusReply {
  struct Held {  // a copy in the store
    std::string job;
    int rank = 0;
    int64_t step = 0;
    uint64_t bytes = 0;
    std::string digest;  // 16 hex digits
  };
  struct Job {  // the incarnation served
    std::string name;
    int node = 0;
    int nodes = 0;
    std::vector<int> peers;
    int64_t round = 0;
  };
  struct Rank {  // a rank registered in the sync map
    int64_t pid = 0;
    int64_t step = -1;  // the newest step it checked
    uint64_t notices = 0;
    int64_t ondemand_step = -1;  // the newest on-demand step it saved
  };
  std::string local_dir;
  std::string address;
  std::vector<Held> steps;
  uint64_t ram_bytes = 0;
  uint64_t spare_bytes = 0;
  bool tmpfs = false;
  std::string huge;  // the tmpfs's huge= option
  int64_t watermark = -1;
  int64_t newest_replicated = -1;
  int64_t newest_ingested = -1;  // since the job last started; -1: none
  std::string last_restore;
  int64_t restored_step = -1;  // of the last restore
  uint64_t queued = 0;
  double replication_lag_seconds = 0;
  std::optional<Job> job;
  std::optional<BackupStatus> backup;
  std::vector<Rank> ranks;
  int64_t training_step = -1;
  std::optional<int64_t> ondemand_step;
  std::optional<std::string> maintenance_since;  // RFC 3339
  static StatusOr<StatusReply> FromJson(const json& j);
  json ToJson() const;
};

// health: healthy or not, why, and the newest maintenance event record
// (an object, passed through as the agent recorded it; null if none).
struct HealthReply {
  bool healthy = false;
  std::string description;
  json maintenance;
  static StatusOr<HealthReply> FromJson(const json& j);
  json ToJson() const;
};

}  // namespace strata::wire

#endif  // STRATA_WIRE_CONTROL_H_
