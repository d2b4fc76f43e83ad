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

namespace strata::agent {

struct SavedState {
  ReplicatorConfig config;
  int64_t round = 0;
  std::map<int, std::string> addresses;  // node rank -> host:port
  std::vector<int> peers;
  ec::Redundancy redundancy;
  std::optional<ec::Group> group;
  int64_t restored_step = -1;     // what the job's start restored (-1: fresh)
  std::set<int64_t> quarantined;  // steps the job must never restore again
};

std::string EncodeAgentState(const SavedState& state);
// INVALID_ARGUMENT (naming `path`) for anything but a state EncodeAgentState
// could have written: not JSON, a missing or mistyped field, a hostile job
// name, an unknown redundancy or group. A state written by an older release
// (no redundancy, group, restored step or quarantine) loads with their
// defaults.
StatusOr<SavedState> DecodeAgentState(std::string_view text, const std::string& path);

// The backup id in a rollback.done record: one valid backup id
// (backup::ParseBackupId), else none.
std::optional<std::string> DecodeRollbackRecord(std::string_view text);

}  // namespace strata::agent

#endif  // STRATA_AGENT_AGENT_STATE_H_
