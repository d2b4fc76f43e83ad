// Copyright 2026 The Strata Authors.
#include "ec/layout.h"

#include <algorithm>
#include <map>
#include <set>

#include "ec/redundancy.h"
#include "util/hash.h"

namespace strata::ec {

std::vector<int> GroupLayout::ParityHolders(int stripe) const {
  std::vector<int> holders;
  for (int j = 0; j < m_; ++j) holders.push_back((stripe + j) % members());
  return holders;
}

std::vector<int> GroupLayout::Contributors(int stripe) const {
  std::vector<int> data;
  for (int x = 0; x < members(); ++x) {
    if (ChunkOf(x, stripe) >= 0) data.push_back(x);
  }
  return data;
}

int GroupLayout::ChunkOf(int member, int stripe) const {
  const int n = members();
  // Member x holds parity of stripes x-m+1 .. x (mod n); it contributes to
  // the k stripes x+1 .. x+k (mod n), chunk c to stripe x+1+c.
  const int c = ((stripe - member - 1) % n + n) % n;
  return c < k_ ? c : -1;
}

std::vector<int> GroupLayout::DataStripes(int member) const {
  std::vector<int> stripes;
  for (int c = 0; c < k_; ++c) stripes.push_back((member + 1 + c) % members());
  return stripes;
}

std::vector<std::pair<int, int>> GroupLayout::ParityOf(int member) const {
  std::vector<std::pair<int, int>> rows;
  for (int j = 0; j < m_; ++j) {
    const int stripe = ((member - j) % members() + members()) % members();
    rows.emplace_back(stripe, j);
  }
  return rows;
}

int Group::Position(int rank) const {
  auto it = std::find(members.begin(), members.end(), rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

Status Group::Validate() const {
  std::set<int> distinct(members.begin(), members.end());
  const bool ok = m >= 1 && k() >= 1 && members.size() <= static_cast<size_t>(kMaxGroupSize) &&
                  distinct.size() == members.size() &&
                  (members.empty() || *distinct.begin() >= 0) &&
                  kind != Redundancy::Kind::kCopies && (kind != Redundancy::Kind::kXor || m == 1);
  if (ok) return Status::Ok();
  return InvalidArgumentError("not a coded group: " + ToString());
}

std::string Group::ToString() const {
  std::string out = code().ToString() + " [";
  for (size_t i = 0; i < members.size(); ++i) {
    out += (i == 0 ? "" : ",") + std::to_string(members[i]);
  }
  return out + "]";
}

std::string Group::Id() const {
  Xxh3Stream h;
  h.UpdateU64(static_cast<uint64_t>(kind));
  h.UpdateU64(static_cast<uint64_t>(m));
  for (int r : members) h.UpdateU64(static_cast<uint64_t>(r));
  return Hex64(h.Digest());
}

uint64_t ChunkBytes(uint64_t largest, int k) {
  const uint64_t per = (largest + static_cast<uint64_t>(k) - 1) / static_cast<uint64_t>(k);
  return (per + 63) / 64 * 64;
}

StatusOr<Groups> FormGroups(const std::vector<std::string>& domains, int size) {
  const int nodes = static_cast<int>(domains.size());
  if (size < 2 || nodes < size) {
    return InvalidArgumentError("cannot form groups of " + std::to_string(size) + " nodes out of " +
                                std::to_string(nodes));
  }
  // A node without a domain is a domain of its own (keys no name can take).
  auto domain = [&](int n) {
    return domains[n].empty() ? std::string(1, '\0') + std::to_string(n) : "d" + domains[n];
  };
  std::map<std::string, std::vector<int>> by_domain;
  for (int n = 0; n < nodes; ++n) by_domain[domain(n)].push_back(n);
  std::vector<std::vector<int>> ordered;  // largest domain first
  for (auto& [name, list] : by_domain) ordered.push_back(std::move(list));
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  // Group sizes: `size`, the remainder shared out, first groups first.
  const int count = nodes / size, extra = nodes % size;
  std::vector<int> capacity(count);
  for (int i = 0; i < count; ++i) capacity[i] = size + extra / count + (i < extra % count ? 1 : 0);
  if (capacity[0] > kMaxGroupSize) {
    return InvalidArgumentError("groups of " + std::to_string(size) + " out of " +
                                std::to_string(nodes) + " nodes would have " +
                                std::to_string(capacity[0]) + " members (at most " +
                                std::to_string(kMaxGroupSize) + ")");
  }
  // Dealt domain by domain, one node to each group in turn: a domain's
  // nodes spread over the groups as evenly as the capacities allow.
  Groups g;
  g.members.resize(count);
  int next = 0;
  for (const auto& list : ordered) {
    for (int n : list) {
      while (static_cast<int>(g.members[next].size()) == capacity[next]) next = (next + 1) % count;
      g.members[next].push_back(n);
      next = (next + 1) % count;
    }
  }
  for (auto& group : g.members) {
    std::sort(group.begin(), group.end());
    std::map<std::string, int> per_domain;
    for (int n : group)
      g.max_in_one_domain = std::max(g.max_in_one_domain, ++per_domain[domain(n)]);
  }
  return g;
}

}  // namespace strata::ec
