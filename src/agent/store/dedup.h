// Copyright 2026 The Strata Authors.
//
// Replication by content. Before a step's bytes go to a peer, the sender
// offers its index, and for a Strata checkpoint the checksummed ranges of
// its manifest (the item chunks; any other step's ranges are the index's
// 16 MiB chunks). The receiver looks each range up, by XXH3-64 and length,
// among the steps of the job it already holds — a data-parallel replica's
// own step has the same bytes, an older step of the sender the chunks that
// training left unchanged — copies the ones it finds into the incoming
// copy, hashing each as it copies, and asks the sender for the rest only.
//
// Dedup never decides what a replica holds: a range is taken only when the
// held bytes hash to the offered value, and the whole copy is then verified
// against its index before it is adopted, as every replica is
// (Store::Adopt). A held copy whose bytes no longer match its index gives
// nothing; the sender sends that range.
#ifndef STRATA_AGENT_STORE_DEDUP_H_
#define STRATA_AGENT_STORE_DEDUP_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "agent/store/store.h"
#include "agent/store/stream_verify.h"
#include "format/step_index.h"
#include "strata/status.h"

namespace strata::agent {

// The checksummed ranges of the held step `key` (with `index`): its
// manifest's item chunks for a Strata step (the manifest read from the
// store), the index's chunks otherwise.
StatusOr<wire::RangePlan> HeldRanges(const Store& store, const wire::StepKey& key,
                                     const StepIndex& index);

// What a receiver found in its own store for an offered step.
struct Taken {
  std::vector<wire::FileRange> ranges;  // copied into the incoming copy and hashed
  uint64_t bytes = 0;
  std::set<wire::StepKey> from;  // the held steps they came from
};

// Copies into `dir`, which holds the files of `index` at their final sizes,
// every range of `offered` (checks of `index`'s files) that some step of
// `job` held in `store` has with the same XXH3-64 and length. Each copied
// range is hashed as it is copied; one whose held bytes hash otherwise is
// logged and left out. Up to `threads` ranges are copied at once. Errors
// are I/O errors on `dir`; a held step that cannot be read only gives
// nothing.
StatusOr<Taken> TakeHeldRanges(const Store& store, const std::string& job, const StepIndex& index,
                               const wire::RangePlan& offered, const std::string& dir, int threads);

// The bytes of `index`'s files outside `taken` (ranges of `index`, in any
// order, disjoint): sorted, disjoint, adjacent ones merged, none empty.
std::vector<wire::FileRange> MissingRanges(const StepIndex& index,
                                           std::vector<wire::FileRange> taken);

// Splits `ranges` into at most `streams` groups of similar total length
// (largest range first to the lightest group); a range longer than
// `piece` is cut into pieces of `piece` bytes first, so one large file
// spreads over the streams. Each group is sorted; no group is empty.
std::vector<std::vector<wire::FileRange>> PartitionRanges(
    const std::vector<wire::FileRange>& ranges, int streams, uint64_t piece);

uint64_t TotalLength(const std::vector<wire::FileRange>& ranges);

}  // namespace strata::agent

#endif  // STRATA_AGENT_STORE_DEDUP_H_
