// Copyright 2026 The Strata Authors.
//
// The coded peer tier's messages (docs/agent-design.md, "Coded redundancy"): a
// group, the parity shards a node reports when it registers, how a plan
// says to decode a node's step, and the two data calls:
//   put_shard  a group member sends one chunk of its step to the holder of
//              one parity row of the chunk's stripe; the chunk follows the
//              answer, and the holder adds it to its shard;
//   get_shard  a node decoding its step reads one shard of a stripe: a
//              member's chunk (from a copy of the member's step) or a parity
//              row; the bytes follow the answer.
// Parsed once at the edge, as the other calls (wire/coordination.h,
// wire/data.h); errors are INVALID_ARGUMENT naming the call and the field.
#ifndef STRATA_WIRE_CODED_H_
#define STRATA_WIRE_CODED_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ec/layout.h"
#include "format/step_index.h"
#include "strata/status.h"
#include "wire/codec.h"
#include "wire/vocabulary.h"

namespace strata::wire {

using json = nlohmann::json;

// {"members": [ranks], "code": "rs" | "xor", "m": M}
// The fields of a group, for the messages that carry one.
const Codec<ec::Group>& GroupCodec();
json GroupToJson(const ec::Group& g);
StatusOr<ec::Group> GroupFromJson(const json& j, const std::string& what);

json HeldParityToJson(const std::vector<HeldParity>& held);
StatusOr<std::vector<HeldParity>> HeldParityFromJson(const json& j, const std::string& what);

// {"group": G, "stripes": [[stripe, [[index, holder, rank], ...]], ...]}
json DecodeToJson(const DecodeSource& d);
StatusOr<DecodeSource> DecodeFromJson(const json& j, const std::string& what);

// put_shard: member key.rank's chunk `chunk` of its step `key` (digest
// `digest`, index `index`), `length` bytes hashing to `xxh3`, for row `row`
// of stripe `stripe` of `group`, which the callee holds.
struct PutShardRequest {
  StepKey key;
  uint64_t digest = 0;
  StepIndex index;
  ec::Group group;
  int stripe = 0;
  int row = 0;
  int chunk = 0;
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  static StatusOr<PutShardRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<PutShardRequest>& Fields();
  json ToJson() const;
};

// The answer to put_shard: the contribution is in already (nothing
// follows), or the chunk's bytes may come.
struct PutShardReady {
  bool have = false;
  static StatusOr<PutShardReady> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<PutShardReady>& Fields();
  json ToJson() const;
};

// get_shard: with `parity`, row `row` of stripe `stripe` of `group`'s step
// key.step (key.rank unused); else chunk `chunk` of the callee's copy of
// step `key`, which must have `digest`, as `group` codes it. `index_of`:
// the answer also carries that member's step index from a parity shard's
// header. `header_only`: no bytes follow.
struct GetShardRequest {
  StepKey key;
  uint64_t digest = 0;
  ec::Group group;
  bool parity = false;
  int stripe = 0;
  int row = 0;
  int chunk = 0;
  std::optional<int> index_of;
  bool header_only = false;
  static StatusOr<GetShardRequest> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<GetShardRequest>& Fields();
  json ToJson() const;
};

// The answer to get_shard: `length` bytes follow (unless header_only),
// hashing to `xxh3` (a parity shard's; 0 for a chunk, whose hash the
// shards' contributions give). For a parity shard, its contributions
// (their indexes left out) and the asked index.
struct ShardReply {
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  std::vector<Contribution> contributions;
  std::optional<StepIndex> index;
  static StatusOr<ShardReply> FromJson(const json& j);
  // Its fields, listed once (wire/codec.h): what parses and writes it.
  static const Codec<ShardReply>& Fields();
  json ToJson() const;
};

}  // namespace strata::wire

#endif  // STRATA_WIRE_CODED_H_
