// Copyright 2026 The Strata Authors.
//
// The client side of the replicator protocol, written the way existing
// training clients behave, so the agent is tested against them:
//   orbax: writes replicator.yaml.tmp and renames it; takes the marker with
//          the highest step and renames it to "<step>" (a symlink to data).
//   nemo:  writes replicator.yaml in place with block lists and
//          peers-per-node; waits for replicator.prerestore; renames the
//          marker to "step=<step>".
#ifndef STRATA_EXAMPLES_TOY_TRAINER_REPLICATOR_CLIENT_H_
#define STRATA_EXAMPLES_TOY_TRAINER_REPLICATOR_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "strata/status.h"

namespace toy {

struct ReplicatorJob {
  std::string style = "orbax";  // or "nemo"
  std::string job = "toy";
  int node_rank = 0;
  int nodes = 1;
  int peers_per_node = 1;
  int data_parallelism = 0;         // assume-data-parallelism; 0: not set
  int backup_interval_steps = 0;    // backup-interval-steps; 0: not set
  int backup_interval_minutes = 0;  // backup-interval-minutes; 0: not set
  std::chrono::seconds timeout{300};
};

// Where the step to restore lives: a directory holding "<step>/" (pass it
// with the step to a restore), or nothing (fresh start).
struct RestorePoint {
  std::string steps_dir;
  int64_t step = 0;
};

// Performs the start-up handshake in `local_dir`; returns the restore point
// or nullopt for a fresh start. Errors name the file and what the agent said.
strata::StatusOr<std::optional<RestorePoint>> Handshake(const std::string& local_dir,
                                                        const ReplicatorJob& job);

}  // namespace toy

#endif  // STRATA_EXAMPLES_TOY_TRAINER_REPLICATOR_CLIENT_H_
