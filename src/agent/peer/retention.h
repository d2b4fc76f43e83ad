// Copyright 2026 The Strata Authors.
//
// What garbage collection keeps of the steps one rank holds (own steps and
// replicas) and of the steps a job's parity codes: bounded, whatever the
// watermark does.
#ifndef STRATA_AGENT_PEER_RETENTION_H_
#define STRATA_AGENT_PEER_RETENTION_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <set>

namespace strata::agent {

// Steps newer than the floor that collection keeps: the save replicating
// now and the one before it (the RAM the agent asks for counts two own
// steps and their parity).
inline constexpr size_t kKeptAboveFloor = 2;

// Of `held` (one rank's steps, or the steps a job's parity codes), the ones
// to keep, given `floor`: the newest step the whole job can restore (the
// watermark, the newest step every node replicated, or the step this start
// of the job restored, whichever is newer; -1 when neither is known):
//   * the newest held step at or below the floor (the restore point);
//   * the kKeptAboveFloor newest steps above it (replicating, or held on
//     every node: a restore from the nodes' own copies takes the newest
//     step all of them hold, and ranks save the same steps).
// So the newest held step is always kept. Everything else goes: older steps, and steps between the
// floor and the newest ones. A replication that cannot finish (a full peer, a member of a coded
// group away) keeps the floor where it is; keeping every later save would fill each node's RAM disk
// until no node could receive anything and the job could never replicate again.
inline std::set<int64_t> StepsToKeep(const std::set<int64_t>& held, int64_t floor) {
  std::set<int64_t> keep;
  auto above = held.upper_bound(floor);
  if (above != held.begin()) keep.insert(*std::prev(above));
  size_t n = 0;
  for (auto it = held.rbegin(); it != held.rend() && *it > floor && n < kKeptAboveFloor; ++it, ++n)
    keep.insert(*it);
  return keep;
}

}  // namespace strata::agent

#endif  // STRATA_AGENT_PEER_RETENTION_H_
