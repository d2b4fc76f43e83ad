// Copyright 2026 The Strata Authors.
//
// Redundancy: how a job's peer tier protects a node's step against lost
// nodes (docs/agent-design.md, "Sizing the RAM disk"):
//   copies     every step goes whole to `peers` other nodes (the default);
//   xor(n)     groups of n nodes; each keeps its own step and 1/(n-1) of the
//              group's XOR parity (SCR's XOR sets): any 1 of the group may go;
//   rs(k,m)    groups of k+m nodes; each keeps its own step and m/k of the
//              group's Reed-Solomon parity: any m of the group may go.
// The text form is what the yaml key `redundancy` and `--redundancy` take:
// "copies", "xor" (a set of 8), "xor(N)", "rs(K,M)".
#ifndef STRATA_EC_REDUNDANCY_H_
#define STRATA_EC_REDUNDANCY_H_

#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::ec {

struct Redundancy {
  enum class Kind { kCopies, kXor, kRs };
  Kind kind = Kind::kCopies;
  int k = 0;  // data shards per stripe (xor(n): n - 1); 0 for copies
  int m = 0;  // parity shards per stripe (xor: 1); 0 for copies

  // INVALID_ARGUMENT naming the text and the rule it breaks.
  static StatusOr<Redundancy> Parse(std::string_view text);
  std::string ToString() const;

  bool coded() const { return kind != Kind::kCopies; }
  int group_size() const { return k + m; }
  // Nodes of one group (for copies: a node and its peers) that may be lost
  // at once with every step still recoverable.
  int Tolerates(int peers) const { return coded() ? m : peers; }
  // RAM a node holds for the peer tier and its own step, in units of its
  // own step: 1 + peers for copies, 1 + m/k when coded (before padding to
  // the group's largest step, see ChunkBytes).
  double RamFactor(int peers) const;
  friend bool operator==(const Redundancy&, const Redundancy&) = default;
};

// The largest group: the codes work over GF(2^8).
inline constexpr int kMaxGroupSize = 255;
// The set size of a bare "xor" (SCR's default).
inline constexpr int kDefaultXorSet = 8;

}  // namespace strata::ec

#endif  // STRATA_EC_REDUNDANCY_H_
