// Copyright 2026 The Strata Authors.
#include "ec/layout.h"

#include <algorithm>
#include <map>

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
  // Round robin over the domains: one node of each in turn.
  std::map<std::string, std::vector<int>> by_domain;
  for (int n = 0; n < nodes; ++n) {
    by_domain[domains[n].empty() ? "node " + std::to_string(n) : domains[n]].push_back(n);
  }
  std::vector<int> dealt;
  for (size_t i = 0; static_cast<int>(dealt.size()) < nodes; ++i) {
    for (const auto& [domain, list] : by_domain) {
      if (i < list.size()) dealt.push_back(list[i]);
    }
  }
  Groups g;
  const int count = nodes / size, extra = nodes % size;
  g.members.resize(count);
  size_t next = 0;
  for (int i = 0; i < count; ++i) {
    const int members = size + extra / count + (i < extra % count ? 1 : 0);
    for (int j = 0; j < members; ++j) g.members[i].push_back(dealt[next++]);
  }
  for (const auto& group : g.members) {
    std::map<std::string, int> per_domain;
    for (int n : group) {
      const int here = ++per_domain[domains[n].empty() ? "node " + std::to_string(n) : domains[n]];
      g.max_in_one_domain = std::max(g.max_in_one_domain, here);
    }
  }
  return g;
}

}  // namespace strata::ec
