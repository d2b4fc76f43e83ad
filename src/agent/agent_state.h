// Copyright 2026 The Strata Authors.
//
// The agent's records of itself in its directory (.strata-agent/), read back
// after a restart from a disk that a crash, a full disk or another process
// may have left in any shape:
//
//   state.json      the job this node serves (its incarnation): a restarted
//                   agent goes on ingesting and replicating without a new
//                   replicator.yaml, and keeps the job's quarantined steps;
//   rollback.done   the backup id a --restore-backup rolled the job back to,
//                   so that an agent restarted with the same flag does not
//                   roll it back again.
//
// Decoding never throws and refuses what it cannot use whole.
#ifndef STRATA_AGENT_AGENT_STATE_H_
#define STRATA_AGENT_AGENT_STATE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config/config.h"
#include "ec/layout.h"
#include "ec/redundancy.h"
#include "strata/status.h"
#include "wire/codec.h"

namespace strata::agent {

// The job this node serves, for one round of it: what a restarted agent
// resumes (Agent's incarnation).
struct Incarnation {
  ReplicatorConfig config;
  int64_t round = 0;
  std::map<int, std::string> addresses;  // node rank -> host:port
  std::vector<int> peers;                // copies go there (redundancy copies)
  ec::Redundancy redundancy;             // the peer tier
  std::optional<ec::Group> group;        // a coded tier's group for the round
  int64_t restored_step = -1;            // what this start of the job restored (-1: fresh)
};

// state.json: the incarnation, and the steps the job must never restore
// again (Restore::Quarantined).
struct SavedState : Incarnation {
  std::set<int64_t> quarantined;
};

// state.json's fields, one list that both reads and writes them
// (wire/codec.h): of the job's config, only what a restart needs.
//
//   {"addresses": {"3": "host:port"}, "dp": 1, "framework": "orbax",
//    "group": G, "job": "llama", "master": "", "node": 2, "nodes": 4,
//    "peers": [3], "quarantined": [100], "redundancy": "copies",
//    "restored_step": -1, "round": 7, "workers": 8}
//
// "group" is written only for a coded tier, "quarantined" only when not
// empty; "redundancy", "group", "restored_step" and "quarantined" may be
// absent (an older release), and "master": "" is no master.
const wire::Codec<SavedState>& SavedStateCodec();

std::string EncodeAgentState(const SavedState& state);
// INVALID_ARGUMENT (naming `path` and the field) for anything but a state
// EncodeAgentState could have written: not JSON, a missing or mistyped
// field, a hostile job name, an unknown redundancy or group. A state written
// by an older release (no redundancy, group, restored step or quarantine)
// loads with their defaults.
StatusOr<SavedState> DecodeAgentState(std::string_view text, const std::string& path);

// rollback.done: the backup id itself, no more (no newline).
std::string EncodeRollbackRecord(const std::string& backup_id);
// The backup id in a rollback.done record: one valid backup id
// (backup::ParseBackupId); otherwise INVALID_ARGUMENT naming `path`.
StatusOr<std::string> DecodeRollbackRecord(std::string_view text, const std::string& path);

}  // namespace strata::agent

#endif  // STRATA_AGENT_AGENT_STATE_H_
