// Copyright 2026 The Strata Authors.
//
// The operator's calls to an agent as typed structs: the answers to
// `status` (read by `strata status` and by `strata run --agent` for its
// progress) and `health` (read by `strata health`); `maintenance` and its
// event record (also kept in the agent's directory, and shown by `health`);
// `quarantine`. The sender builds a struct and sends ToJson(); the reader
// parses once with FromJson, INVALID_ARGUMENT naming the call and the field.
#ifndef STRATA_WIRE_CONTROL_H_
#define STRATA_WIRE_CONTROL_H_

#include <array>
#include <chrono>
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
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<BackupStatus>& Fields();
  json ToJson() const;
};

// Where the job's time on a node went (agent/node/goodput.h), in seconds.
struct Goodput {
  double elapsed_seconds = 0;     // since the job first started under this agent
  double productive_seconds = 0;  // training of steps never lost
  double save_seconds = 0;        // the ranks blocked in Save()
  double restore_seconds = 0;     // from a start's yaml to its data in place
  double wasted_seconds = 0;      // training of steps an interruption lost
  double other_seconds = 0;       // the job down between an interruption and its next start
  double goodput = 0;             // productive / elapsed
  int64_t step = 0;               // the newest step trained
  int64_t wasted_steps = 0;
  int64_t interruptions = 0;
  static StatusOr<Goodput> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<Goodput>& Fields();
  json ToJson() const;
  friend bool operator==(const Goodput&, const Goodput&) = default;
};

// The categories elapsed time splits into: the name (the metric's
// `category` label; the JSON key adds "_seconds") and the field.
struct GoodputCategory {
  const char* name;
  double Goodput::*seconds;
};
inline constexpr std::array<GoodputCategory, 5> kGoodputCategories = {{
    {"productive", &Goodput::productive_seconds},
    {"save", &Goodput::save_seconds},
    {"restore", &Goodput::restore_seconds},
    {"wasted", &Goodput::wasted_seconds},
    {"other", &Goodput::other_seconds},
}};

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
    std::string redundancy = "copies";  // the peer tier
    std::vector<int> group = {};        // a coded tier's group, in group order
  };
  struct Parity {  // a parity shard held (coded tier)
    int64_t step = 0;
    int stripe = 0;
    int row = 0;
    uint64_t bytes = 0;
    bool complete = false;
  };
  struct Rank {  // a rank registered in the sync map
    int64_t pid = 0;
    int64_t step = -1;  // the newest step it checked
    uint64_t notices = 0;
    int64_t ondemand_step = -1;  // the newest on-demand step it saved
    // Its Save() calls: how long they blocked it, and how many; absent
    // from an older agent.
    std::optional<double> save_stall_seconds;
    std::optional<int64_t> saves;
  };
  std::string local_dir;
  std::string address;
  std::vector<Held> steps;
  uint64_t ram_bytes = 0;
  uint64_t spare_bytes = 0;
  uint64_t parity_bytes = 0;  // of parity shards (coded tier)
  std::vector<Parity> parity;
  bool tmpfs = false;
  std::string huge;  // the tmpfs's huge= option
  int64_t watermark = -1;
  int64_t newest_replicated = -1;
  int64_t newest_ingested = -1;  // since the job last started; -1: none
  std::string last_restore;
  int64_t restored_step = -1;  // of the last restore
  // Where the restore under way (or the last one) stands: "registering",
  // "awaiting plan", ..., "done"; absent before the first.
  std::optional<std::string> restore_state;
  uint64_t queued = 0;
  double replication_lag_seconds = 0;
  std::optional<Job> job;
  std::optional<BackupStatus> backup;
  std::vector<Rank> ranks;
  int64_t training_step = -1;
  std::optional<int64_t> ondemand_step;
  std::optional<std::string> maintenance_since;  // RFC 3339
  std::optional<Goodput> goodput;                // once the job has started here
  static StatusOr<StatusReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<StatusReply>& Fields();
  json ToJson() const;
};

// maintenance: SIGTERM to the node's ranks, wait for them at most `grace`,
// optionally hold the node until its on-demand step is on its peers and
// wipe its RAM (`lose_ram`).
struct MaintenanceRequest {
  std::chrono::milliseconds grace{300000};  // 0..24 h
  bool lose_ram = false;
  std::string origin = "strata maintenance";
  static StatusOr<MaintenanceRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<MaintenanceRequest>& Fields();
  json ToJson() const;
};

// A maintenance event as it went: the answer to `maintenance`, the record
// the agent keeps, and the event `health` shows.
struct MaintenanceEvent {
  std::string time;  // RFC 3339
  int64_t unix_ms = 0;
  std::string origin;
  int64_t grace_ms = 0;
  bool lose_ram = false;
  int ranks = 0;  // that got SIGTERM
  double ranks_exited_seconds = 0;
  int ranks_killed = 0;              // at the end of the grace period
  std::optional<int64_t> sync_step;  // the job's on-demand step, if one was decided
  bool saved = false;                // held here
  bool replicated = false;           // and on every peer
  bool wiped = false;                // the RAM is gone
  double seconds = 0;                // the whole event
  static StatusOr<MaintenanceEvent> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<MaintenanceEvent>& Fields();
  json ToJson() const;
};

// health: healthy or not, why, and the newest maintenance event.
struct HealthReply {
  bool healthy = false;
  std::string description;
  std::optional<MaintenanceEvent> maintenance;
  static StatusOr<HealthReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<HealthReply>& Fields();
  json ToJson() const;
};

// quarantine: `strata run --agent` found a crash loop on `step`; the job
// must never restore it again. The answer is the coordinator's
// (QuarantineStepReply).
struct QuarantineRequest {
  int64_t step = 0;
  static StatusOr<QuarantineRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<QuarantineRequest>& Fields();
  json ToJson() const;
};
struct QuarantineStepReply {
  std::string description;
  static StatusOr<QuarantineStepReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<QuarantineStepReply>& Fields();
  json ToJson() const;
};

// supervisor_restart: `strata run --agent` restarts the node's training
// command after it exited with `exit_code`, for `reason` ("failed",
// "planned", "quarantined"). The answer is an empty object.
struct SupervisorRestartRequest {
  std::string reason;
  int exit_code = 0;
  static StatusOr<SupervisorRestartRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<SupervisorRestartRequest>& Fields();
  json ToJson() const;
};

}  // namespace strata::wire

#endif  // STRATA_WIRE_CONTROL_H_
