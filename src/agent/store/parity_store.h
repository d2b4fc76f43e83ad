// Copyright 2026 The Strata Authors.
//
// ParityStore: the parity shards a node holds for the coded peer tier
// (docs/agent-design.md, "Coded redundancy"). A shard is row `row` of stripe
// `stripe` of one group's step: the sum over GF(2^8) of every member's
// contribution to that stripe, each contribution a chunk of the member's
// step (ec/layout.h says which), zero-padded to the longest.
//
//   <local>/.strata-agent/parity/<job>/<step>/<group id>-s<stripe>-r<row>
//
// One file per shard, the parity bytes first (so they can be sent with
// sendfile from offset 0), a header after them, and a fixed footer:
//
//   0      L   the parity bytes (L = the header's "length")
//   L      n   the header: JSON
//   L+n    24  magic "STRATAPS", format version (u32), n (u32), XXH3-64 of
//              the header (u64); little-endian
//
// The header names the group (members in order, code, m), the stripe and
// row, the parity's length and XXH3-64, and each contribution: the
// contributor's rank, its chunk number and the chunk's length and XXH3-64,
// and the digest and index of the contributor's step (a restore that
// decodes a lost member's step takes its index from here).
//
// A contribution rewrites the shard: the new parity (old + coefficient *
// chunk) goes to a temporary file beside it, slab by slab as the chunk
// arrives, and replaces the old shard by the commit protocol (fsync, rename,
// fsync the directory) once the chunk's XXH3-64 matches its sender's. A
// crash leaves the old shard or the new one; temporaries go at Open.
// Contributions to one shard are serialized; to different shards they run
// in parallel. Thread-safe.
#ifndef STRATA_AGENT_STORE_PARITY_STORE_H_
#define STRATA_AGENT_STORE_PARITY_STORE_H_

#include <chrono>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ec/layout.h"
#include "format/step_index.h"
#include "strata/env.h"
#include "strata/status.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "wire/vocabulary.h"

namespace strata::agent {

// Which shard: a step of a job, a group, a stripe and a row of it.
struct ParityKey {
  std::string job;
  int64_t step = 0;
  std::string group;  // ec::Group::Id()
  int stripe = 0;
  int row = 0;
  auto operator<=>(const ParityKey&) const = default;
  std::string ToString() const;  // "job/step/group-s<stripe>-r<row>"
};

struct ParityHeader {
  std::string job;
  int64_t step = 0;
  ec::Group group;
  int stripe = 0;
  int row = 0;
  uint64_t length = 0;                            // bytes of parity: the longest contribution's
  uint64_t xxh3 = 0;                              // of the parity bytes
  std::vector<wire::Contribution> contributions;  // in the order they came

  ParityKey key() const { return {job, step, group.Id(), stripe, row}; }
  // Every contributor of the stripe is in: the shard can stand in for any
  // of them.
  bool complete() const { return contributions.size() == static_cast<size_t>(group.k()); }
  const wire::Contribution* Find(int rank) const;
};

class ParityStore {
 public:
  // Opens (creating) the shards under `dir` (.strata-agent/parity), reading
  // every header; a shard whose footer, header or size does not check is
  // removed and logged; temporaries are removed.
  // `contended_stall`: see Contribute's `abort`, timed on `clock`.
  static StatusOr<std::unique_ptr<ParityStore>> Open(
      const std::string& dir, Env* env, std::chrono::milliseconds contended_stall = kContendedStall,
      SteadyClock* clock = SteadyClock::Real());

  // How long a contribution's sender may move no byte while another
  // contribution to its shard, or a Remove, waits for the shard.
  static constexpr std::chrono::milliseconds kContendedStall{10000};

  // Reads exactly `n` bytes of a contribution into `buf`.
  using Reader = std::function<Status(void* buf, size_t n)>;
  // Ends a contribution's transfer: called from another thread, it makes
  // the reader's current and later reads fail.
  using Abort = std::function<void()>;
  // What Contribute did.
  enum class Added { kAdded, kAlreadyIn };
  // Adds `c` to shard (`where`.job, .step, .group, .stripe, .row), reading
  // its c.length bytes through `read` (all of them, also when the
  // contribution turns out to be in already). `where` gives the shard's
  // identity; its length, hash and contributions are ignored. A
  // contribution of the same rank with another step digest replaces the
  // shard (the member saved that step again): the shard starts over.
  // DATA_LOSS when the bytes do not hash to c.xxh3 (nothing changes);
  // INVALID_ARGUMENT when the contributor does not feed the stripe or
  // `where` does not describe one of its rows.
  //
  // Contributions to one shard take turns. While another waits for the
  // shard, one whose reader moved no byte for `contended_stall` is ended
  // through `abort` (if given): a sender gone without a reset must not hold
  // the shard for every other member until its own stall limit (two
  // minutes, for a cut that heals) ends it.
  StatusOr<Added> Contribute(const ParityHeader& where, const wire::Contribution& c,
                             const Reader& read, Abort abort = {});
  // Whether the shard holds `rank`'s contribution for a step of `digest`.
  bool Has(const ParityKey& key, int rank, uint64_t digest) const;

  // Every shard held, by key.
  std::map<ParityKey, ParityHeader> List() const;
  StatusOr<ParityHeader> Get(const ParityKey& key) const;
  // The shard's file: its parity bytes are at [0, header.length).
  std::string PathOf(const ParityKey& key) const;
  // Reads and checks the parity bytes against the header's XXH3-64.
  Status Verify(const ParityKey& key) const;
  // Waits for a contribution being written to `key` to end (or ends it, as
  // a contribution waiting would).
  Status Remove(const ParityKey& key);
  // For collection, which must not wait on a peer: UNAVAILABLE, the shard
  // left as it is, while a contribution is being written to `key` (its
  // sender may be slow, or gone and not yet timed out). With `listed` (the
  // shard as List gave it earlier), the shard goes only while it still holds
  // one of `listed`'s contributions (rank and step digest): once it started
  // over, it holds only newer ones and stays (FAILED_PRECONDITION, as when
  // it is gone).
  Status RemoveIfIdle(const ParityKey& key, const ParityHeader* listed = nullptr);
  uint64_t BytesHeld() const;  // parity bytes, without headers

 private:
  ParityStore(std::string dir, Env* env, std::chrono::milliseconds contended_stall,
              SteadyClock* clock)
      : dir_(std::move(dir)), env_(env), contended_stall_(contended_stall), clock_(clock) {}
  Status Load();
  Status LoadShard(const std::string& path);
  // Writes the new shard for `next` (whose contributions include `c`) from
  // the old one (`old`, if any) and the chunk `read` supplies.
  Status Rewrite(const ParityHeader* old, ParityHeader* next, const wire::Contribution& c,
                 int shard, const Reader& read);
  // `read` in pieces, each one noted as the shard's holder moving bytes.
  Status ReadNoting(const ParityKey& key, const Reader& read, void* buf, size_t n) EXCLUDES(mu_);
  // Serializes contributions to one shard; `who` and `abort` describe and
  // end the holder (Contribute).
  void Lock(const ParityKey& key, std::string who = "", Abort abort = {}) EXCLUDES(mu_);
  bool TryLock(const ParityKey& key) EXCLUDES(mu_);  // false: a contribution holds it
  void Unlock(const ParityKey& key) EXCLUDES(mu_);
  Status RemoveLocked(const ParityKey& key) EXCLUDES(mu_);

  const std::string dir_;
  Env* const env_;
  const std::chrono::milliseconds contended_stall_;
  SteadyClock* const clock_;
  mutable Mutex mu_;
  CondVar unlocked_;
  std::map<ParityKey, ParityHeader> held_ GUARDED_BY(mu_);
  // A shard being written, and by whom.
  struct Busy {
    SteadyClock::time_point moved;  // its holder's last bytes (or its start), on clock_
    std::string who;                // "node 3's chunk 2", for the log
    Abort abort;                    // empty: never ended by a waiter
    bool ended = false;
  };
  std::map<ParityKey, Busy> busy_ GUARDED_BY(mu_);
};

// The header's JSON and back (the footer and file layout aside):
//
//   {"job": J, "step": S, "group": {"members": [ranks], "code": "rs" | "xor",
//    "m": M}, "stripe": S, "row": R, "length": L, "xxh3": "16 hex digits",
//    "contributions": [{"rank": N, "chunk": C, "length": L, "xxh3": X,
//                       "digest": D, "index": I}, ...]}
//
// its fields one list that both reads and writes them (wire/codec.h).
// Decoding checks every field and that the shard fits its group; errors are
// DATA_LOSS prefixed with `source`, naming the field.
std::string EncodeParityHeader(const ParityHeader& h);
StatusOr<ParityHeader> DecodeParityHeader(std::string_view text, std::string_view source);

}  // namespace strata::agent

#endif  // STRATA_AGENT_STORE_PARITY_STORE_H_
