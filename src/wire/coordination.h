// Copyright 2026 The Strata Authors.
//
// The coordination calls' requests as typed messages (wire/op.h names the
// calls). The coordinator parses a request once, at the edge, with
// FromJson: every field's presence and type is checked there, and an error
// is INVALID_ARGUMENT naming the call and the field ("register: \"nodes\"
// must be an integer in 1..100000"); nothing downstream reads the JSON.
// Senders build the struct and send ToJson(). Checks that need the job's
// state (a node rank below the job's node count, the current round) stay
// with the coordinator.
//
// Optional fields are std::optional or have the default the protocol has
// always had; a field a sender leaves out is left out of the JSON.
#ifndef STRATA_WIRE_COORDINATION_H_
#define STRATA_WIRE_COORDINATION_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ec/redundancy.h"
#include "net/endpoint.h"
#include "strata/status.h"
#include "wire/codec.h"
#include "wire/coded.h"

namespace strata::wire {

using json = nlohmann::json;

// A copy a node holds: node `rank`'s step `step`, whose index has `digest`.
// On the wire: [rank, step, "hex digest"].
struct HeldCopy {
  int rank = 0;
  int64_t step = 0;
  uint64_t digest = 0;
  friend bool operator==(const HeldCopy&, const HeldCopy&) = default;
};

// A holder that failed to serve a copy: [holder, rank, step].
struct FailedHolder {
  int holder = 0;
  int rank = 0;
  int64_t step = 0;
  friend bool operator==(const FailedHolder&, const FailedHolder&) = default;
};

// The backup cadence and worker count a node reports (each positive when
// present; absent in reports of agents without a backup tier).
struct Cadence {
  std::optional<int> backup_interval_steps;
  std::optional<int> backup_interval_minutes;
  std::optional<int> workers_per_node;
};

// register: a node's start (incarnation) and what it holds.
struct RegisterRequest {
  std::string job;
  int node = 0;
  int nodes = 1;
  int dp = 1;  // data-parallel replicas
  net::Endpoint address;
  std::string incarnation;  // empty: an agent that sends none
  std::vector<HeldCopy> inventory;
  Cadence cadence;
  // The peer tier the node runs for the job (every node must run the same)
  // and its failure domain; the complete parity shards it holds (coded).
  ec::Redundancy redundancy = {};
  std::string domain = "";
  std::vector<HeldParity> parity = {};
  // The steps of the job this node's agent knows were quarantined: a
  // coordinator that restarted learns them back from the registrations.
  std::set<int64_t> quarantined = {};
  static StatusOr<RegisterRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<RegisterRequest>& Fields();
  json ToJson() const;
};

// await_plan: waits for a plan newer than `plan_version`. With `node`, the
// reply holds what that node needs (its source, its holders' and `peers`'
// addresses); without, the whole plan.
struct AwaitPlanRequest {
  std::string job;
  int64_t round = 0;
  int64_t plan_version = 0;
  std::optional<int> node;
  std::vector<int> peers;
  std::optional<std::chrono::milliseconds> wait;  // "wait_ms"
  static StatusOr<AwaitPlanRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<AwaitPlanRequest>& Fields();
  json ToJson() const;
};

// ready: a node's result for a plan.
struct ReadyRequest {
  std::string job;
  int64_t round = 0;
  int node = 0;
  int64_t plan_version = -1;
  bool ok = false;
  std::vector<FailedHolder> bad;
  std::optional<std::chrono::milliseconds> wait;
  static StatusOr<ReadyRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<ReadyRequest>& Fields();
  json ToJson() const;
};

// The most requested backups (a client's _BACKUP_REQUESTED) a job has
// pending at once: each keeps a step in every node's RAM until it is
// uploaded. A newer request past it displaces the oldest.
inline constexpr size_t kMaxRequestedBackups = 4;

// replicated: a node's newest step on all its peers. `nodes` and `dp` let a
// restarted coordinator learn the job.
struct ReplicatedRequest {
  std::string job;
  int node = 0;
  int64_t step = -1;
  std::optional<int> nodes;
  std::optional<int> dp;
  Cadence cadence;
  // Steps requested for a backup (a client's _BACKUP_REQUESTED here, or
  // the coordinator's list) whose copy this node holds; and those of the
  // coordinator's list this node went past without holding.
  std::set<int64_t> requested;
  std::set<int64_t> requested_missing;
  static StatusOr<ReplicatedRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<ReplicatedRequest>& Fields();
  json ToJson() const;
};

// backup_done: a node's part of a backup uploaded, or failed.
struct BackupDoneRequest {
  std::string job;
  int node = 0;
  std::string id;
  int part = 0;
  int64_t step = -1;
  bool ok = false;
  std::string error = "upload failed";  // when !ok
  uint64_t bytes = 0;
  std::optional<uint64_t> digest;  // required when ok
  // When !ok: the node no longer holds the step (it was collected before
  // the task reached it). Not a failure of the store: the coordinator
  // begins a backup of a newer step at once instead of waiting to retry.
  bool step_gone = false;
  static StatusOr<BackupDoneRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<BackupDoneRequest>& Fields();
  json ToJson() const;
};

// node_address: where node `node` of `job` (or of the only job) listens.
struct NodeAddressRequest {
  std::optional<std::string> job;
  int node = 0;
  static StatusOr<NodeAddressRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<NodeAddressRequest>& Fields();
  json ToJson() const;
};

// notice: a maintenance notice reached a node whose ranks are at `step`.
struct NoticeRequest {
  std::string job;
  int node = 0;
  int64_t step = -1;
  std::string origin;
  static StatusOr<NoticeRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<NoticeRequest>& Fields();
  json ToJson() const;
};

// sync: a node's progress; waits for the on-demand step decision.
struct SyncRequest {
  std::string job;
  int node = 0;
  int64_t step = -1;
  double rate = 0;  // steps per second
  uint64_t generation = 0;
  uint64_t collect = 0;
  std::optional<std::chrono::milliseconds> wait;
  // The round the node restored in: a coordinator that restarted since
  // (and learned the job from reports) decides for that round.
  std::optional<int64_t> round;
  static StatusOr<SyncRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<SyncRequest>& Fields();
  json ToJson() const;
};

// quarantine_step: never restore `step` of `job` again.
struct QuarantineStepRequest {
  std::string job;
  int node = 0;
  int64_t step = 0;
  static StatusOr<QuarantineStepRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<QuarantineStepRequest>& Fields();
  json ToJson() const;
};

// add_copies: copies that arrived while the node waits for a plan.
struct AddCopiesRequest {
  std::string job;
  int64_t round = 0;
  int node = 0;
  std::vector<HeldCopy> inventory;
  static StatusOr<AddCopiesRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<AddCopiesRequest>& Fields();
  json ToJson() const;
};

// The on-demand step as the coordinator decided it: the answer to sync and
// notice calls, and part of a ready call's "go". `generation` counts
// decisions (a node takes each once); `collect` names the collection of the
// nodes' steps in progress, which a node's next sync call reports to.
struct SyncDecision {
  uint64_t generation = 0;
  int64_t round = 0;  // the round it was decided for
  uint64_t collect = 0;
  bool collecting = false;
  std::optional<int64_t> step;  // none: nothing decided
  int64_t notice_unix_ms = 0;   // when the notice came (with a step)
  // The newest step the notified node's ranks had checked when the notice
  // came (with a step; absent from an older coordinator): the on-demand
  // step's distance from the notice is step - notice_step.
  std::optional<int64_t> notice_step;
  std::string origin;  // who sent it (with a step)
  static StatusOr<SyncDecision> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<SyncDecision>& Fields();
  json ToJson() const;
};

// The answer to register: the round the node is a member of.
struct RegisterReply {
  int64_t round = 0;
  static StatusOr<RegisterReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<RegisterReply>& Fields();
  json ToJson() const;
};

// The answer to node_address: where node `node` of `job` listens.
struct NodeAddressReply {
  std::string job;
  int node = 0;
  std::string address;  // host:port
  static StatusOr<NodeAddressReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<NodeAddressReply>& Fields();
  json ToJson() const;
};

// The answer to backup_done: the report came too late (a new round began,
// or the backup failed elsewhere: "abandoned"), or whether it completed
// the backup ("committed"; "committing" while the commit is being
// written).
struct BackupDoneReply {
  bool abandoned = false;
  std::optional<bool> committed;
  bool committing = false;
  static StatusOr<BackupDoneReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<BackupDoneReply>& Fields();
  json ToJson() const;
};

// The answer to add_copies: whether the round's plan was already made (the
// copies came too late to count in it).
struct AddCopiesReply {
  bool planned = false;
  static StatusOr<AddCopiesReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<AddCopiesReply>& Fields();
  json ToJson() const;
};

// The answer to ready: "go" (every node is ready; with the on-demand step
// the job decided meanwhile, to publish before any rank can pass it), or
// "replan" (a node failed, or the plan changed: wait for the next one).
struct ReadyReply {
  bool go = false;
  bool replan = false;
  std::optional<SyncDecision> sync;  // with go
  static StatusOr<ReadyReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<ReadyReply>& Fields();
  json ToJson() const;
};

// The answer to a replication report: the job-wide watermark (the newest
// step every node replicated; -1 until each has reported) and the state of
// backups as the coordinator sees it, with this node's part to upload.
struct ReplicatedReply {
  struct Backup {  // a committed backup
    std::string id;
    int64_t step = 0;
    int64_t created = 0;    // unix seconds
    int64_t committed = 0;  // unix seconds
  };
  struct Task {  // part `part` of backup `id`: step `step` of node rank `part`
    std::string id;
    int64_t step = 0;
    int part = 0;
  };
  int64_t watermark = -1;
  std::optional<Backup> newest_backup;
  std::string backup_error;  // the job's last backup failure
  std::optional<Task> backup_task;
  // The job's steps requested for a backup and not yet backed up: a node
  // keeps its copy of each, and says whether it holds one.
  std::set<int64_t> requested;
  static StatusOr<ReplicatedReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<ReplicatedReply>& Fields();
  json ToJson() const;
};

// await_plan's answer: the round's restore plan, whole or as one node
// needs it (its own source; its holders' and peers' addresses).
// The fields of a committed backup (in ReplicatedReply and in `status`).
const Codec<ReplicatedReply::Backup>& BackupCodec();

struct PlanReply {
  int64_t round = 0;
  int64_t plan_version = 0;
  std::optional<int64_t> step;  // none: nothing to restore (a fresh start)
  std::map<int, Source> sources;
  std::map<int, std::string> addresses;  // node rank -> host:port
  std::string reason;
  std::string backup;                    // the backup id that holds the step, if any
  std::string error;                     // the job cannot start: why
  std::optional<int64_t> discard_above;  // a rollback: newer steps are the abandoned run's
  // With a coded redundancy, the asking node's group for this round (the
  // addresses include its members').
  std::optional<ec::Group> group;
  // The job's quarantined steps: every node's agent keeps them for its next
  // registration, so they outlive a restart of the coordinator.
  std::set<int64_t> quarantined;
  static StatusOr<PlanReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<PlanReply>& Fields();
  json ToJson() const;
};

}  // namespace strata::wire

#endif  // STRATA_WIRE_COORDINATION_H_
