// Copyright 2026 The Strata Authors.
//
// Pure decisions of the agent, kept free of I/O so they can be tested
// exhaustively: which peers hold a node's copies, and which step the whole
// job restores and from where.
#ifndef STRATA_AGENT_PLAN_PLANNER_H_
#define STRATA_AGENT_PLAN_PLANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ec/layout.h"
#include "wire/vocabulary.h"

namespace strata::agent {

// The peers that receive copies of node `rank`'s checkpoints when the job
// asks for `peers_per_node` of them. Peers are spread evenly around the
// ring of nodes — rank + k * ceil(nodes / (peers_per_node + 1)) for k = 1.. —
// so that consecutive ranks (which usually share a rack, a slice or a
// power domain) do not hold each other's only copy. With data parallelism
// D, peers are chosen in other replicas first (a stride that is a multiple
// of nodes / D), so a whole replica can be lost. Never includes `rank`;
// deterministic; at most nodes - 1 peers.
std::vector<int> ChoosePeers(int rank, int nodes, int peers_per_node, int data_parallelism = 1);

// One copy of one node's checkpoint at one step, held by some agent or by
// the backup tier (holder kBackupHolder).
struct Copy {
  int holder = 0;       // node rank of the agent holding it, or kBackupHolder
  uint64_t digest = 0;  // content digest of the step
};

// What every agent reported: for each (source rank, step) the copies that
// exist and verified, and for each step the parity shards held.
struct Inventory {
  // copies[source_rank][step] = copies, one per holder.
  std::map<int, std::map<int64_t, std::vector<Copy>>> copies;
  std::map<int64_t, std::vector<wire::HeldParity>> parity;  // by step
  void Add(int source_rank, int64_t step, int holder, uint64_t digest);
  // A shard `holder` reported (the report does not carry the holder).
  void AddParity(int holder, wire::HeldParity shard) {
    shard.holder = holder;
    parity[shard.step].push_back(std::move(shard));
  }
};

struct RestorePlan {
  std::optional<int64_t> step;          // nullopt: nothing to restore (fresh start)
  std::map<int, wire::Source> sources;  // by node rank; empty when !step
  std::string reason;                   // why this step (for the log)
  // Non-empty: the job cannot be restored as it registered (then !step);
  // names the step, the column and the ranks that disagree.
  std::string error;
};

// The newest step for which every node in [0, nodes) can get a copy of its
// own checkpoint, or with `data_parallelism` D > 1 of the checkpoint of the
// node in the same position of another replica (ranks r and r' are
// interchangeable when r % (nodes / D) == r' % (nodes / D)). A node prefers
// its own copy, then a copy on a peer, then decoding its step from its
// coded group (each of its stripes needs k shards: the other members'
// chunks, from copies of their steps with the digest the parity was coded
// from, and complete parity shards), and the backup tier last; its own
// rank's data before a substitute's.
// Copies of one (rank, step) that disagree on the digest are all distrusted,
// as are a group's parity shards that disagree on a member's digest.
// A rank with no copy of its own at a step (a replica added since the job
// saved it, or one that lost every copy) takes its column's content: the
// column is rank mod (nodes / D), whatever D the job saved with. When two
// ranks of that column hold different digests there, the content is not
// the column's to give: the plan is an error naming the step, the column
// and the ranks, not an older step (the job restarted at its saved size
// restores that step).
// `excluded` lists (holder, source rank, step) copies known to be bad (they
// failed verification during a previous attempt); (holder, kParityRank,
// step) excludes a holder's parity shards of that step.
RestorePlan PlanRestore(const Inventory& inventory, int nodes, int data_parallelism,
                        const std::set<std::tuple<int, int, int64_t>>& excluded = {});

}  // namespace strata::agent

#endif  // STRATA_AGENT_PLAN_PLANNER_H_
