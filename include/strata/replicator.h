// Copyright 2026 The Strata Authors.
//
// The client side of the replicator protocol (docs/agent-protocol.md): how a training
// process asks its node agent what to restore. A Checkpointer opened with
// CheckpointerOptions::agent_job performs it inside Restore()/RestoreInto();
// AgentHandshake() is the same exchange on its own.
//
// Two client styles are spoken, the ones existing training code uses:
//   orbax: writes replicator.yaml.tmp and renames it into place, lists peers
//          as `peer-ranks: [..]`; takes the marker with the highest step
//          and renames it to "<step>".
//   nemo:  writes replicator.yaml in place with block style and
//          `peers-per-node`; waits for replicator.prerestore; renames the
//          marker to "step=<step>".
#ifndef STRATA_REPLICATOR_H_
#define STRATA_REPLICATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "strata/status.h"

namespace strata {

// This process's part in a job whose nodes each run an agent.
struct AgentJob {
  std::string job;  // job-name: letters, digits, '-', '_', '.'
  int node_rank = 0;
  int nodes = 1;
  // Copies of each step on other nodes. The orbax style lists them as
  // explicit peer-ranks, spread the way the agent's own default spreads
  // them; the nemo style sends peers-per-node.
  int peers_per_node = 1;
  int assume_data_parallelism = 0;  // 0: not sent
  int backup_interval_steps = 0;    // 0: not sent
  int backup_interval_minutes = 0;  // 0: not sent (nemo sends 30)
  std::string style = "orbax";      // or "nemo"
  // The peer tier the job asks for ("xor(8)", "rs(6,2)", ...); "": not
  // sent (the agents' --redundancy, else copies). Neither real client
  // writes one; the key is Strata's.
  std::string redundancy = "";
  // How long to wait for each answer of the agent.
  std::chrono::seconds timeout{300};
  // Optional: polled every 10 ms while waiting for the agent; a non-OK
  // status ends the handshake with it (e.g. an interrupt in a binding).
  std::function<Status()> cancelled = nullptr;
};

// The step the agent restored for this node: `steps_dir/<step>/` holds it.
struct RestorePoint {
  std::string steps_dir;
  int64_t step = 0;
};

// Writes replicator.yaml into `local_dir`, waits until the agent accepts it
// and publishes the restore markers, consumes the newest marker and removes
// the others. Returns nullopt when the agent says to start fresh (a step-0
// marker). FAILED_PRECONDITION with the agent's reason when it writes
// replicator.failed; DEADLINE_EXCEEDED naming the file it waited for (a
// replicator.yaml no agent took is removed again).
StatusOr<std::optional<RestorePoint>> AgentHandshake(const std::string& local_dir,
                                                     const AgentJob& job);

}  // namespace strata

#endif  // STRATA_REPLICATOR_H_
