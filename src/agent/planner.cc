// Copyright 2026 The Strata Authors.
#include "agent/planner.h"

#include <algorithm>
#include <tuple>

namespace strata::agent {
namespace {

// The distinct steps anyone holds, newest first.
std::vector<int64_t> CandidateSteps(const Inventory& inv) {
  std::set<int64_t, std::greater<>> steps;
  for (const auto& [rank, by_step] : inv.copies) {
    for (const auto& [step, copies] : by_step) steps.insert(step);
  }
  return {steps.begin(), steps.end()};
}

// Usable copies of (source_rank, step): not excluded, and all agreeing on
// the digest (disagreeing copies mean at least one is wrong; trust none).
std::vector<Copy> UsableCopies(const Inventory& inv, int source_rank, int64_t step,
                               const std::set<std::tuple<int, int, int64_t>>& excluded) {
  std::vector<Copy> out;
  auto r = inv.copies.find(source_rank);
  if (r == inv.copies.end()) return out;
  auto s = r->second.find(step);
  if (s == r->second.end()) return out;
  for (const Copy& c : s->second) {
    if (!excluded.count({c.holder, source_rank, step})) out.push_back(c);
  }
  for (const Copy& c : out) {
    if (c.digest != out.front().digest) return {};
  }
  return out;
}

// Candidates for node `rank`: its own rank first, then the other replicas'
// nodes at the same position.
std::vector<int> SubstituteRanks(int rank, int nodes, int dp) {
  std::vector<int> ranks = {rank};
  if (dp <= 1) return ranks;
  const int width = nodes / dp;
  for (int k = 1; k < dp; ++k) ranks.push_back((rank + k * width) % nodes);
  return ranks;
}

// How fast a node gets a copy from `holder`: its own store, a peer, the
// backup tier.
int Tier(const Copy& c, int rank) {
  if (c.holder == rank) return 0;
  return c.holder == kBackupHolder ? 2 : 1;
}

// The fastest source for node `rank`: among its own rank's copies and (with
// data parallelism) the interchangeable ranks', the one whose best copy is
// in the fastest tier; its own rank on a tie.
std::optional<Source> FindSource(const Inventory& inv, int rank, int nodes, int dp, int64_t step,
                                 const std::set<std::tuple<int, int, int64_t>>& excluded) {
  std::optional<Source> best;
  int best_tier = 3;
  for (int src : SubstituteRanks(rank, nodes, dp)) {
    std::vector<Copy> copies = UsableCopies(inv, src, step, excluded);
    if (copies.empty()) continue;
    // Own store first, then peers in rank order, then the backup.
    std::stable_sort(copies.begin(), copies.end(),
                     [&](const Copy& a, const Copy& b) { return Tier(a, rank) < Tier(b, rank); });
    const int tier = Tier(copies.front(), rank);
    if (tier >= best_tier) continue;
    best_tier = tier;
    best = Source{src, {}, copies.front().digest};
    for (const Copy& c : copies) best->holders.push_back(c.holder);
    if (tier == 0) break;  // its own store: nothing is better
  }
  return best;
}

}  // namespace

std::vector<int> ChoosePeers(int rank, int nodes, int peers_per_node, int data_parallelism) {
  std::vector<int> peers;
  if (nodes <= 1 || peers_per_node <= 0) return peers;
  const size_t want = static_cast<size_t>(std::min(peers_per_node, nodes - 1));
  int stride = (nodes + static_cast<int>(want)) / (static_cast<int>(want) + 1);  // ceil(n/(k+1))
  if (data_parallelism > 1 && nodes % data_parallelism == 0) stride = nodes / data_parallelism;
  auto add = [&](int p) {
    if (p != rank && peers.size() < want &&
        std::find(peers.begin(), peers.end(), p) == peers.end()) {
      peers.push_back(p);
    }
  };
  for (int k = 1; k < nodes; ++k) add((rank + k * stride) % nodes);  // spread out
  for (int k = 1; k < nodes; ++k) add((rank + k) % nodes);           // fill if the stride cycled
  return peers;
}

void Inventory::Add(int source_rank, int64_t step, int holder, uint64_t digest) {
  copies[source_rank][step].push_back({holder, digest});
}

RestorePlan PlanRestore(const Inventory& inventory, int nodes, int data_parallelism,
                        const std::set<std::tuple<int, int, int64_t>>& excluded) {
  const int dp = (data_parallelism > 1 && nodes % data_parallelism == 0) ? data_parallelism : 1;
  RestorePlan plan;
  for (int64_t step : CandidateSteps(inventory)) {
    std::map<int, Source> sources;
    int missing = -1;
    for (int rank = 0; rank < nodes && missing < 0; ++rank) {
      auto src = FindSource(inventory, rank, nodes, dp, step, excluded);
      if (src)
        sources[rank] = *src;
      else
        missing = rank;
    }
    if (missing < 0) {
      plan.step = step;
      plan.sources = std::move(sources);
      plan.reason += "step " + std::to_string(step) + " is complete for all " +
                     std::to_string(nodes) + " nodes";
      return plan;
    }
    plan.reason += "step " + std::to_string(step) + " has no usable copy for node " +
                   std::to_string(missing) + "; ";
  }
  plan.reason += "nothing to restore";
  return plan;
}

}  // namespace strata::agent
