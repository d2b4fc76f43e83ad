// Copyright 2026 The Strata Authors.
//
// The words the agents' messages are made of, owned here so that every
// layer above (the agent's store, planner, peer tier, coordinator; the CLI)
// speaks the same types: which step of which node (StepKey), which bytes
// of it (FileRange), how they are checked as they arrive (RangePlan), where
// a node's data for a restore comes from (Source, DecodeSource), and what
// the coded peer tier holds (HeldParity, Contribution). Nothing here does
// I/O; the codecs of the messages that carry these words are in the other
// files of wire/.
#ifndef STRATA_WIRE_VOCABULARY_H_
#define STRATA_WIRE_VOCABULARY_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ec/layout.h"
#include "format/step_index.h"
#include "strata/status.h"

namespace strata::wire {

using json = nlohmann::json;

// The most nodes a job may have; every rank on the wire is below it.
inline constexpr int kMaxNodes = 100000;

// One step of one node's checkpoints: the unit agents hold and transfer.
struct StepKey {
  std::string job;
  int rank = 0;
  int64_t step = 0;
  auto operator<=>(const StepKey&) const = default;
  std::string ToString() const;  // "job/rank/step"
};

// OK iff the key is safe to turn into a path (see ValidateJobName).
Status ValidateStepKey(const StepKey& key);

// {"job": J, "rank": R, "step": S}; decoding validates the key
// (INVALID_ARGUMENT).
json StepKeyToJson(const StepKey& key);
StatusOr<StepKey> StepKeyFromJson(const json& j);

// A byte range of one file of a step: [offset, offset + length) of the
// file at position `file` of its index.
struct FileRange {
  size_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t end() const { return offset + length; }
  auto operator<=>(const FileRange&) const = default;
};

// The byte ranges of `index`'s files that hold bytes [offset, offset +
// length) of the step read as one stream, its files concatenated in index
// order (a coded step's chunks are cut from that stream). Clipped at the
// stream's end; empty files are skipped.
std::vector<FileRange> StreamSlice(const StepIndex& index, uint64_t offset, uint64_t length);

// INVALID_ARGUMENT unless every range lies within a file of `index`.
Status CheckRanges(const StepIndex& index, const std::vector<FileRange>& ranges);

// One range of one file whose XXH3-64 is known.
struct RangeCheck {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  int64_t item = -1;   // index into RangePlan::item_names; -1: a chunk of the index
  uint64_t chunk = 0;  // chunk number within the item (or the file)

  uint64_t end() const { return offset + length; }
};

// How the files of a step are checked as their bytes arrive
// (agent/store/stream_verify.h makes and runs one).
struct RangePlan {
  // For each file of the index (same positions), its checks ordered by end.
  std::vector<std::vector<RangeCheck>> files;
  std::vector<std::string> item_names;  // of a Strata step's manifest
};

// Holders: a node rank, or the backup tier (a committed backup's parts).
inline constexpr int kBackupHolder = -1;
// As the rank of a failed (holder, rank, step): the holder's parity shards
// of that step (one served bytes that did not check).
inline constexpr int kParityRank = -2;

// A complete parity shard a node holds (the coded peer tier): row `row` of
// stripe `stripe` of `group`'s step `step`, every contributor's chunk in
// it, and the digest of each contributor's step it was coded from.
struct HeldParity {
  int64_t step = 0;
  ec::Group group;
  int stripe = 0;
  int row = 0;
  std::map<int, uint64_t> digests;  // contributor rank -> its step's digest
  // The node holding it. Not on the wire: a node reports its own shards,
  // and the coordinator fills this in from the report's sender.
  int holder = 0;
  friend bool operator==(const HeldParity&, const HeldParity&) = default;
};

// One member's chunk, added into a parity shard.
struct Contribution {
  int rank = 0;         // the contributing node
  int chunk = 0;        // which of its step's k chunks
  uint64_t length = 0;  // the chunk's bytes (0..chunk size; the rest is zeros)
  uint64_t xxh3 = 0;    // of those bytes
  uint64_t step_digest = 0;
  StepIndex index;  // of the contributor's step: what a decode must rebuild
};

// One shard a decode reads: shard `index` of its stripe (0..k-1 the data
// shards of GroupLayout::Contributors in order, k + j parity row j), from
// node `holder`. For a data shard `rank` names the member whose step's
// chunk it is (a copy of that step is held there); for parity it is
// kParityRank.
struct ShardSource {
  int index = 0;
  int holder = 0;
  int rank = kParityRank;
  friend bool operator==(const ShardSource&, const ShardSource&) = default;
};
struct StripeSource {
  int stripe = 0;
  std::vector<ShardSource> shards;  // k of them
  friend bool operator==(const StripeSource&, const StripeSource&) = default;
};
// How a node's step is decoded from its group: for each of its k data
// stripes, in its chunks' order, the k shards that rebuild its chunk.
struct DecodeSource {
  ec::Group group;
  std::vector<StripeSource> stripes;
  friend bool operator==(const DecodeSource&, const DecodeSource&) = default;
};

// Where a node gets its data for the restore step: a copy of node
// `source_rank`'s step (its own, or under data parallelism the same
// position's in another replica) from one of `holders` (kBackupHolder for
// the backup tier), whose index has `digest`; or, with `decode`, its
// group's shards (holders then lists the parity holders, any of which has
// the step's index).
struct Source {
  int source_rank = 0;
  std::vector<int> holders;  // the preferred first
  uint64_t digest = 0;
  std::optional<DecodeSource> decode = std::nullopt;
  friend bool operator==(const Source&, const Source&) = default;
};

}  // namespace strata::wire

#endif  // STRATA_WIRE_VOCABULARY_H_
