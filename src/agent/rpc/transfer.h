// Copyright 2026 The Strata Authors.
//
// Several TCP streams for one step. A large step is split into groups of
// files of similar size; each group travels on its own authenticated
// connection ("put_files"), while the connection that announced the step
// ("put_step" with "streams") waits for every group, then verifies and
// commits the whole step and acknowledges once. On loopback and on hosts
// with several cores this spreads the receiver's page allocation and
// copying over cores; across a network it also fills links that one TCP
// stream cannot. A restore fetches the same way, in the other direction
// ("get_index", then "fetch_step" with "files" on each connection).
#ifndef STRATA_AGENT_RPC_TRANSFER_H_
#define STRATA_AGENT_RPC_TRANSFER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/rpc/client.h"
#include "agent/store/store.h"
#include "format/step_index.h"
#include "strata/status.h"
#include "util/mutex.h"

namespace strata::agent {

// Steps smaller than this, or with one file, use one stream.
inline constexpr uint64_t kMultiStreamMinBytes = 16ull << 20;

// Splits the files of `index` into at most `streams` non-empty groups of
// similar total size (largest file first to the lightest group). Each group
// lists positions in index.files, ascending.
std::vector<std::vector<size_t>> PartitionFiles(const StepIndex& index, int streams);
// The same for the files at `positions` only.
std::vector<std::vector<size_t>> PartitionFiles(const StepIndex& index,
                                                const std::vector<size_t>& positions, int streams);

// The index restricted to the files at `positions`.
StepIndex SubIndex(const StepIndex& index, const std::vector<size_t>& positions);

// A copy received into an incoming directory of a store, not committed.
struct FetchedCopy {
  std::string dir;
  StepIndex index;
  // Every byte was checked as it arrived (StreamVerifier); committing it
  // needs only the layout check.
  bool data_verified = false;
};

// Fetches the copy of `key` held by the agent at `to` (connecting as
// `client_id`) into a new incoming directory of `store`, over up to
// `streams` connections of one file group each, receiving into the store's
// spare files and verifying the data while it arrives (a Strata step's
// manifest comes first, to say what to check). The caller commits it
// (AdoptCopy) or removes the directory; on error nothing is left behind.
// DATA_LOSS means the holder's copy is corrupt: it names the file and the
// range that differ. With `digest`, a holder whose copy has another digest
// (not the copy a restore plan chose) is FAILED_PRECONDITION, before any
// data moves.
StatusOr<FetchedCopy> FetchCopy(const Endpoint& to, const net::Trust& trust,
                                const std::string& client_id, const wire::StepKey& key, int streams,
                                Store* store, std::optional<uint64_t> digest = std::nullopt);

// Commits a fetched copy to `store` as `key`: Store::AdoptVerified when its
// data was verified on arrival, Store::Adopt otherwise. On error the
// incoming directory is removed.
Status AdoptCopy(Store* store, const wire::StepKey& key, const FetchedCopy& copy);

// The receiver's table of multi-stream transfers in progress. A transfer
// arrives as files (the sender's groups of whole files), or as the groups
// of byte ranges the receiver asked for (put_step with dedup). Thread-safe.
class TransferTable {
 public:
  // Registers a transfer of `index` into `dir`: of every file, or of the
  // range groups `need` when given; returns its id.
  uint64_t Begin(std::string dir, StepIndex index,
                 std::vector<std::vector<wire::FileRange>> need = {});
  // The directory and index of a registered transfer.
  Status Lookup(uint64_t id, std::string* dir, StepIndex* index);
  // Claims range group `group` of transfer `id` for one connection: its
  // ranges. INVALID_ARGUMENT for a group it does not have or one claimed
  // before.
  StatusOr<std::vector<wire::FileRange>> ClaimGroup(uint64_t id, size_t group);
  // Records that `parts` parts (files, or range groups) arrived, or that a
  // group failed.
  void Finish(uint64_t id, size_t parts, const Status& status);
  // Waits until every part arrived or a group failed; DEADLINE_EXCEEDED if
  // nothing arrives for `stall`.
  Status Wait(uint64_t id, std::chrono::milliseconds stall);
  void End(uint64_t id);

 private:
  struct Transfer {
    std::string dir;
    StepIndex index;
    std::vector<std::vector<wire::FileRange>> need;  // empty: whole files
    std::vector<bool> claimed;                       // per group of `need`
    size_t arrived = 0;
    Status error;
    size_t parts() const { return need.empty() ? index.files.size() : need.size(); }
  };
  Mutex mu_;
  CondVar cv_;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Transfer> active_ GUARDED_BY(mu_);
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_RPC_TRANSFER_H_
