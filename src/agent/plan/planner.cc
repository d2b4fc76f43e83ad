// Copyright 2026 The Strata Authors.
#include "agent/plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <string>
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
  return c.holder == wire::kBackupHolder ? 2 : 1;
}

using Excluded = std::set<std::tuple<int, int, int64_t>>;

// A holder of a copy of `rank`'s `step` with `digest` that may serve a data
// shard: the member itself first.
std::optional<int> DataHolder(const Inventory& inv, int rank, int64_t step, uint64_t digest,
                              const Excluded& excluded) {
  std::optional<int> found;
  for (const Copy& c : UsableCopies(inv, rank, step, excluded)) {
    if (c.digest != digest || c.holder == wire::kBackupHolder) continue;
    if (c.holder == rank) return rank;
    if (!found) found = c.holder;
  }
  return found;
}

// The digest of each member's step the group's shards were coded from;
// nullopt when two shards disagree (then none of them is trusted).
std::optional<std::map<int, uint64_t>> Consensus(
    const std::vector<const wire::HeldParity*>& shards) {
  std::map<int, uint64_t> digests;
  for (const wire::HeldParity* p : shards) {
    for (const auto& [rank, digest] : p->digests) {
      auto [it, fresh] = digests.emplace(rank, digest);
      if (!fresh && it->second != digest) return std::nullopt;
    }
  }
  return digests;
}

// The k shards of `stripe` that rebuild member `lost`'s chunk: data shards
// of the other contributors from copies of their steps, then parity rows.
std::optional<wire::StripeSource> PlanStripe(const Inventory& inv, const ec::Group& g, int stripe,
                                             int lost, int64_t step,
                                             const std::map<int, uint64_t>& digests,
                                             const std::vector<const wire::HeldParity*>& shards,
                                             const Excluded& excluded, int* found) {
  const ec::GroupLayout layout = g.layout();
  wire::StripeSource out{stripe, {}};
  const std::vector<int> data = layout.Contributors(stripe);
  for (size_t i = 0; i < data.size() && out.shards.size() < static_cast<size_t>(g.k()); ++i) {
    if (data[i] == lost) continue;
    const int rank = g.members[data[i]];
    auto digest = digests.find(rank);
    if (digest == digests.end()) continue;
    if (auto h = DataHolder(inv, rank, step, digest->second, excluded)) {
      out.shards.push_back({static_cast<int>(i), *h, rank});
    }
  }
  for (int row = 0; row < g.m && out.shards.size() < static_cast<size_t>(g.k()); ++row) {
    for (const wire::HeldParity* p : shards) {
      if (p->stripe != stripe || p->row != row ||
          excluded.count({p->holder, wire::kParityRank, step})) {
        continue;
      }
      out.shards.push_back({g.k() + row, p->holder, wire::kParityRank});
      break;
    }
  }
  *found = static_cast<int>(out.shards.size());
  if (out.shards.size() < static_cast<size_t>(g.k())) return std::nullopt;
  return out;
}

// Decoding `rank`'s step from a group whose complete shards of `step` hold
// it; *why says what is missing when none can.
std::optional<wire::Source> FindDecode(const Inventory& inv, int rank, int64_t step,
                                       const Excluded& excluded, std::string* why) {
  auto at = inv.parity.find(step);
  if (at == inv.parity.end()) return std::nullopt;
  std::map<std::string, std::vector<const wire::HeldParity*>> by_group;
  for (const wire::HeldParity& p : at->second) {
    if (p.group.Position(rank) >= 0) by_group[p.group.Id()].push_back(&p);
  }
  for (const auto& [id, shards] : by_group) {
    const ec::Group& g = shards.front()->group;
    std::optional<std::map<int, uint64_t>> digests = Consensus(shards);
    if (!digests) {
      *why = "the shards of group " + g.ToString() + " disagree on the steps they code";
      continue;
    }
    if (!digests->count(rank)) {  // its stripes' shards are incomplete or gone
      *why = "no complete shard of group " + g.ToString() + " codes its step";
      continue;
    }
    const int lost = g.Position(rank);
    wire::Source src{rank, {}, digests->at(rank), wire::DecodeSource{g, {}}};
    bool all = true;
    for (int stripe : g.layout().DataStripes(lost)) {
      int found = 0;
      std::optional<wire::StripeSource> ss =
          PlanStripe(inv, g, stripe, lost, step, *digests, shards, excluded, &found);
      if (!ss) {
        *why = "group " + g.ToString() + ": stripe " + std::to_string(stripe) + " has " +
               std::to_string(found) + " of the " + std::to_string(g.k()) + " shards it needs";
        all = false;
        break;
      }
      for (const wire::ShardSource& shard : ss->shards) {
        if (shard.rank == wire::kParityRank &&
            std::find(src.holders.begin(), src.holders.end(), shard.holder) == src.holders.end()) {
          src.holders.push_back(shard.holder);
        }
      }
      src.decode->stripes.push_back(std::move(*ss));
    }
    if (all) return src;
  }
  return std::nullopt;
}

std::string HexDigest(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

// A rank with no copy of its own at `step` takes its column's content: why
// it cannot when the column's ranks hold different digests; nullopt when
// they agree (or it has copies of its own).
std::optional<std::string> ColumnConflict(const Inventory& inv, int rank, int nodes, int dp,
                                          int64_t step, const Excluded& excluded) {
  if (dp <= 1 || !UsableCopies(inv, rank, step, excluded).empty()) return std::nullopt;
  std::map<uint64_t, std::vector<int>> ranks_by_digest;
  for (int src : SubstituteRanks(rank, nodes, dp)) {
    std::vector<Copy> copies = UsableCopies(inv, src, step, excluded);
    if (!copies.empty()) ranks_by_digest[copies.front().digest].push_back(src);
  }
  if (ranks_by_digest.size() <= 1) return std::nullopt;
  std::string held;
  for (const auto& [digest, ranks] : ranks_by_digest) {
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    for (int r : sorted) {
      held += (held.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " digest " +
              HexDigest(digest);
    }
  }
  return "step " + std::to_string(step) + ": column " + std::to_string(rank % (nodes / dp)) +
         " holds conflicting content (" + held + "), so rank " + std::to_string(rank) +
         ", which has no copy of its own, cannot be given it";
}

// The fastest source for node `rank`: among its own rank's copies and (with
// data parallelism) the interchangeable ranks', the one whose best copy is
// in the fastest tier; its own rank on a tie. A node without a copy in the
// cluster decodes its step from its group's shards if it can, before the
// backup; *why says why it could not.
std::optional<wire::Source> FindSource(const Inventory& inv, int rank, int nodes, int dp,
                                       int64_t step, const Excluded& excluded, std::string* why) {
  std::optional<wire::Source> best;
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
    best = wire::Source{src, {}, copies.front().digest, std::nullopt};
    for (const Copy& c : copies) best->holders.push_back(c.holder);
    if (tier == 0) break;  // its own store: nothing is better
  }
  if (best_tier <= 1) return best;
  if (std::optional<wire::Source> decoded = FindDecode(inv, rank, step, excluded, why))
    return decoded;
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
    std::map<int, wire::Source> sources;
    int missing = -1;
    std::string why, conflict;
    for (int rank = 0; rank < nodes && missing < 0; ++rank) {
      why.clear();
      if (auto c = ColumnConflict(inventory, rank, nodes, dp, step, excluded)) {
        if (conflict.empty()) conflict = *c;
        continue;
      }
      auto src = FindSource(inventory, rank, nodes, dp, step, excluded, &why);
      if (src)
        sources[rank] = *src;
      else
        missing = rank;
    }
    if (missing < 0 && !conflict.empty()) {  // complete but for the column's content
      plan.error = conflict;
      plan.reason += conflict;
      return plan;
    }
    if (missing < 0) {
      plan.step = step;
      plan.sources = std::move(sources);
      plan.reason += "step " + std::to_string(step) + " is complete for all " +
                     std::to_string(nodes) + " nodes";
      return plan;
    }
    plan.reason += "step " + std::to_string(step) + " has no usable copy for node " +
                   std::to_string(missing) + (why.empty() ? "" : " (" + why + ")") + "; ";
  }
  plan.reason += "nothing to restore";
  return plan;
}

}  // namespace strata::agent
