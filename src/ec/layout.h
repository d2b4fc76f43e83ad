// Copyright 2026 The Strata Authors.
//
// Where a coded group's shards live. A group of n = k + m members (0..n-1
// in group order) codes n stripes. Stripe s has its m parity shards on
// members s, s+1, ..., s+m-1 (mod n) and its k data shards from the other
// k members, in member order: a member's data shard in stripe s is the
// c-th chunk of its own step, c counting the stripes it contributes to.
// So every member splits its step into k chunks, contributes each to one
// stripe, and holds m parity chunks (one in each of m stripes): its RAM is
// its step plus m/k of it. Losing any m members costs every stripe at most
// m shards, which the code rebuilds from the k left.
//
// Chunk geometry: the steps of a group are padded (with zeros) to the
// largest of them, L, and each is split into k chunks of ChunkBytes(L, k).
//
// FormGroups splits a job's nodes into such groups, each spread across
// failure domains (racks, hosts of one switch) as far as they allow.
#ifndef STRATA_EC_LAYOUT_H_
#define STRATA_EC_LAYOUT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ec/redundancy.h"
#include "strata/status.h"

namespace strata::ec {

class GroupLayout {
 public:
  // REQUIRES: k >= 1, m >= 1.
  GroupLayout(int k, int m) : k_(k), m_(m) {}

  int k() const { return k_; }
  int m() const { return m_; }
  int members() const { return k_ + m_; }
  int stripes() const { return k_ + m_; }

  // The members holding stripe s's parity rows 0..m-1, in row order.
  std::vector<int> ParityHolders(int stripe) const;
  // The members contributing stripe s's data shards, in coding order (the
  // position is the shard's index 0..k-1).
  std::vector<int> Contributors(int stripe) const;
  // The chunk of `member`'s step that is stripe s's data shard, or -1 when
  // the member holds one of its parity rows instead.
  int ChunkOf(int member, int stripe) const;
  // The stripe each of `member`'s k chunks goes to, in chunk order.
  std::vector<int> DataStripes(int member) const;
  // The parity `member` holds: m (stripe, row) pairs.
  std::vector<std::pair<int, int>> ParityOf(int member) const;

 private:
  int k_, m_;
};

// One coded group of a job: its members' node ranks in group order and its
// code. A group formed from the remainder of a job's nodes may be larger
// than the code's nominal size: its k grows, m stays.
struct Group {
  std::vector<int> members;
  Redundancy::Kind kind = Redundancy::Kind::kRs;
  int m = 1;

  int k() const { return static_cast<int>(members.size()) - m; }
  // The code the group runs: (kind, k(), m).
  Redundancy code() const { return Redundancy{kind, k(), m}; }
  GroupLayout layout() const { return GroupLayout(k(), m); }
  // The member position of node `rank`, -1 if it is not a member.
  int Position(int rank) const;
  // OK iff the group can run its code: m >= 1, k >= 1, at most
  // kMaxGroupSize members, distinct ranks >= 0, xor with m == 1.
  Status Validate() const;
  // "rs(6,2) [0,1,2,3,4,5,6,7]": for logs and errors.
  std::string ToString() const;
  // 16 hex digits naming the members, the kind and m: parity shards of
  // different groups never share a name.
  std::string Id() const;
  friend bool operator==(const Group&, const Group&) = default;
};

// Bytes of one chunk for a group whose largest step is `largest` bytes:
// ceil(largest / k), rounded up to 64 (the SIMD width the codes want).
uint64_t ChunkBytes(uint64_t largest, int k);

struct Groups {
  std::vector<std::vector<int>> members;  // per group, node ranks in group order
  // The most members any group has in one failure domain: a lost domain
  // costs no group more than this many members.
  int max_in_one_domain = 0;
};

// Splits nodes 0..domains.size()-1 into groups of `size` nodes; the
// remainder (nodes mod size) is shared among the groups as evenly as it
// goes, first groups first, so a group may have more than `size` members
// (its k grows: the same m losses tolerated, a little less RAM). The nodes
// of each failure domain ("" is a domain of its own per node), largest
// domain first, are dealt to the groups in turn, so every domain spreads
// over the groups as evenly as it can. A group lists its nodes in rank
// order. INVALID_ARGUMENT when there are fewer nodes than `size`, or a
// group would exceed kMaxGroupSize.
StatusOr<Groups> FormGroups(const std::vector<std::string>& domains, int size);

}  // namespace strata::ec

#endif  // STRATA_EC_LAYOUT_H_
