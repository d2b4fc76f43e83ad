// Copyright 2026 The Strata Authors.
//
// Helpers for tests that run the agent's components in one process.
#ifndef STRATA_TESTS_COMPONENT_UTIL_H_
#define STRATA_TESTS_COMPONENT_UTIL_H_

#include <optional>
#include <set>

#include "agent/replication.h"
#include "format/sync_map.h"

namespace strata::testing {

// `hooks` with each hook left unset filled in by one that does nothing: no
// incarnation (so nothing is sent), no on-demand step, no pins, no backup
// cadence. call_coordinator stays as given (it is only called for a target).
inline agent::Replication::Hooks IdleReplicationHooks(agent::Replication::Hooks hooks = {}) {
  using agent::Replication;
  if (!hooks.target) hooks.target = [] { return std::optional<Replication::Target>(); };
  if (!hooks.priority_step) hooks.priority_step = [] { return kNoSyncStep; };
  if (!hooks.pins) hooks.pins = [] { return std::set<agent::StepKey>(); };
  if (!hooks.on_replica) hooks.on_replica = [](const agent::StepKey&, uint64_t) {};
  if (!hooks.cadence) {
    hooks.cadence = [](const ReplicatorConfig&) { return wire::Cadence(); };
  }
  if (!hooks.on_reply) {
    hooks.on_reply = [](const ReplicatorConfig&, const wire::ReplicatedReply&) {};
  }
  return hooks;
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_COMPONENT_UTIL_H_
