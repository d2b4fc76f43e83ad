// Copyright 2026 The Strata Authors.
//
// Store: the agent's own data in the node's local directory. It lives under
// a hidden directory that no client name can match:
//
//   <local>/.strata-agent/
//     steps/<job>/<rank>/<step>/        a step of node <rank> (own or a replica)
//     steps/<job>/<rank>/<step>.index   its StepIndex; written last, so a step
//                                       is held iff both exist
//     incoming/.strata-tmp-*            transfers in progress (removed at open)
//     spare/<n>                         data files of removed steps, kept for
//                                       reuse by the next transfer (emptied at open)
//
// Steps enter by rename from the client's directory (Ingest: same file
// system, no copy) or from a verified transfer (Adopt). Thread-safe.
//
// Spare files: writing into pages a file already has is several times
// faster than into new ones (new tmpfs pages cost a first touch, which on
// virtual machines includes the hypervisor's). So Remove() keeps the data
// files of the step it removes, up to the size of the largest step held
// (about one step), and a transfer takes them (TakeSpare) instead of
// creating files. Between transfers that memory stays allocated; at the
// peak, while the next step arrives, use is what it would have been.
#ifndef STRATA_AGENT_STORE_STORE_H_
#define STRATA_AGENT_STORE_STORE_H_

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "agent/store/step_seal.h"
#include "format/naming.h"
#include "format/step_index.h"
#include "format/sync_map.h"
#include "strata/status.h"
#include "util/mutex.h"
#include "util/thread_pool.h"
#include "wire/vocabulary.h"

namespace strata::agent {

class Store {
 public:
  // Opens (creating) the store in `local_dir`; finishes or undoes whatever a
  // crash interrupted: removes incoming transfers, indexes step directories
  // that lack an index, drops indexes (and seals) without data.
  // Every file operation goes through `env`.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& local_dir, ThreadPool* pool,
                                               Env* env = Env::Default());

  const std::string& root() const { return root_; }
  Env* env() const { return env_; }
  std::string StepPath(const wire::StepKey& key) const;
  // The step's path relative to the local directory (for restore markers).
  std::string RelativeStepPath(const wire::StepKey& key) const;

  // Moves the committed client directory `client_dir` into the store and
  // indexes it. The client directory is gone afterwards.
  StatusOr<StepIndex> Ingest(const std::string& client_dir, const wire::StepKey& key);

  // A fresh directory for an incoming transfer.
  StatusOr<std::string> NewIncomingDir();
  // Verifies `dir` against `index` and moves it into the store as `key`,
  // replacing an existing copy.
  Status Adopt(const std::string& dir, const wire::StepKey& key, const StepIndex& index);
  // The same for a `dir` whose every byte the caller has verified against
  // `index` (a fetch checks each range as it arrives, StreamVerifier): only
  // the files, their sizes and a Strata manifest's digest are checked.
  Status AdoptVerified(const std::string& dir, const wire::StepKey& key, const StepIndex& index);

  bool Has(const wire::StepKey& key) const;
  StatusOr<StepIndex> GetIndex(const wire::StepKey& key) const;
  // Every step held, with its index.
  std::map<wire::StepKey, StepIndex> List() const;
  // Re-verifies a held step's bytes.
  Status Verify(const wire::StepKey& key);
  // Proves a held step unchanged since its bytes were last checked (its
  // seal, CheckStepIdentity) without reading them, or else reads and
  // verifies them and seals them again. Returns whether it read the bytes;
  // DATA_LOSS if they no longer verify (the caller drops the copy).
  // A copy is sealed when it is ingested, adopted or verified here.
  StatusOr<bool> CheckHeld(const wire::StepKey& key);
  // Removes a step (seal and index first, then the data, renamed out of the way); its
  // data files become spare files within the limit, the rest are deleted.
  // With `digest`, only the copy of that digest: FAILED_PRECONDITION, the
  // copy left, when the copy held is another (or none).
  Status Remove(const wire::StepKey& key, std::optional<uint64_t> digest = std::nullopt);
  uint64_t BytesHeld() const;

  // A spare file to receive `size` bytes into, renamed to `path` (which must
  // not exist); false when there is none. The file may be longer or shorter
  // than `size`: the caller writes from offset 0 and truncates to `size`.
  bool TakeSpare(uint64_t size, const std::string& path);
  // Deletes every spare file (e.g. when the node's RAM is wiped).
  void DropSpare();
  uint64_t SpareBytes() const;

 private:
  Store(std::string local_dir, ThreadPool* pool, Env* env);
  Status Recover();
  Status WriteIndex(const wire::StepKey& key, const StepIndex& index);
  // Records how the files of `key` were when their bytes were read; a
  // failure only costs a full verification at the next restart.
  void WriteSeal(const wire::StepKey& key, const StepIndex& index, const StepIdentity& identity);
  Status AdoptChecked(const std::string& dir, const wire::StepKey& key, const StepIndex& index,
                      VerifyScope scope);
  // Moves the data files of `index` in `dir` to the spare directory while
  // they fit the limit.
  void KeepSpare(const std::string& dir, const StepIndex& index);

  const std::string local_dir_;
  const std::string root_;
  ThreadPool* const pool_;
  Env* const env_;
  mutable Mutex mu_;
  std::map<wire::StepKey, StepIndex> held_ GUARDED_BY(mu_);
  std::multimap<uint64_t, std::string> spare_ GUARDED_BY(mu_);  // size -> path
  uint64_t spare_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t spare_limit_ GUARDED_BY(mu_) = 0;    // the largest step held so far
  uint64_t spare_counter_ GUARDED_BY(mu_) = 0;  // names spare files
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_STORE_STORE_H_
