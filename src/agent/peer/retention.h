// Copyright 2026 The Strata Authors.
//
// What garbage collection keeps of the steps one rank holds (own steps and
// replicas) and of the steps a job's parity codes: everything from the
// restore point up while the RAM disk has room, a bounded few once it runs
// short, whatever the watermark does.
#ifndef STRATA_AGENT_PEER_RETENTION_H_
#define STRATA_AGENT_PEER_RETENTION_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <set>

namespace strata::agent {

// Steps newer than the floor that bounded collection keeps: the save
// replicating now and the one before it (the RAM the agent asks for counts
// two own steps and their parity).
inline constexpr size_t kKeptAboveFloor = 2;

// Collection is bounded once the RAM disk is at least this full (a
// fraction of its size); below, it keeps every step from the floor up.
// A node learns the watermark a report later than the coordinator, and
// ranks drift apart by a save or two: the steps between a node's floor and
// its newest are the ones the coordinator's next backup, or the job's next
// restore, may take.
inline constexpr double kBoundedCollectionFill = 0.5;

// Of `held` (one rank's steps, or the steps a job's parity codes), the ones
// to keep, given `floor`: the newest step the whole job can restore (the
// watermark, the newest step every node replicated, or the step this start
// of the job restored, whichever is newer; -1 when neither is known):
//   * the newest held step at or below the floor (the restore point);
//   * `bounded`: the kKeptAboveFloor newest steps above it (replicating, or
//     held on every node: a restore from the nodes' own copies takes the
//     newest step all of them hold, and ranks save the same steps);
//     otherwise every step above it.
//   * `bounded`: the newest held step at or below `previous_floor`, the
//     floor before the current one in this start of the job (-1: none),
//     kept until the floor moves again. Nodes learn the watermark a report
//     apart, and bounded collection drops the steps between a floor and the
//     newest: a node that has moved to the new floor keeps the one a node
//     still at the old floor keeps, so the job holds a step in common
//     (copies seed 142 at eight nodes: node 1 at 350 dropped 375, node 0 at
//     375 dropped 350, and no step above the backup was on every node).
//     Unbounded, a node keeps every step from its floor up, among them the
//     newest step of a node behind it (at or above the new floor, which
//     that node replicated).
// So the newest held step is always kept; older steps go (but, bounded, the
// last floor's step), and, bounded, the steps between the floor and the
// newest ones. A replication that cannot finish (a full peer, a member of
// a coded group away) keeps the floor where it is; keeping every later save
// for ever would fill each node's RAM disk until no node could receive
// anything and the job could never replicate again. Hence the bound once
// the disk runs short.
inline std::set<int64_t> StepsToKeep(const std::set<int64_t>& held, int64_t floor,
                                     bool bounded = true, int64_t previous_floor = -1) {
  std::set<int64_t> keep;
  auto above = held.upper_bound(floor);
  if (above != held.begin()) keep.insert(*std::prev(above));
  if (!bounded) {
    keep.insert(above, held.end());
    return keep;
  }
  if (auto at = held.upper_bound(previous_floor); at != held.begin()) keep.insert(*std::prev(at));
  size_t n = 0;
  for (auto it = held.rbegin(); it != held.rend() && *it > floor && n < kKeptAboveFloor; ++it, ++n)
    keep.insert(*it);
  return keep;
}

}  // namespace strata::agent

#endif  // STRATA_AGENT_PEER_RETENTION_H_
