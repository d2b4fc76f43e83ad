// Copyright 2026 The Strata Authors.
//
// Checkpointer: saves and restores one process's state in a local directory
// (typically a RAM disk), with interval and on-demand (preemption) policies.
//
//   auto ckpt = strata::Checkpointer::Open("/local", options);
//   auto restored = (*ckpt)->RestoreInto(my_buffers);   // or start fresh
//   for (step = first; step <= last; ++step) {
//     Train(step);
//     if ((*ckpt)->ShouldSave(step)) {                  // an atomic load
//       auto r = (*ckpt)->Save(step, my_items);
//       if (r.ok() && r->should_exit) return 0;        // on-demand done
//     }
//   }
//
// Thread safety: ShouldSave() may be called from any thread at any time.
// Save(), Wait(), Restore*() must not be called concurrently with each other
// (one training thread drives them). status() is thread-safe.
#ifndef STRATA_CHECKPOINTER_H_
#define STRATA_CHECKPOINTER_H_

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "strata/catalog.h"
#include "strata/env.h"
#include "strata/replicator.h"
#include "strata/status.h"
#include "strata/types.h"

namespace strata {

struct CheckpointerOptions {
  // --- Save policy (ShouldSave) ---
  // Save when step % save_interval_steps == 0. 0 disables.
  int64_t save_interval_steps = 0;
  // Save at the first ShouldSave() after this many seconds since Open() or
  // the last save. A background timer flips a flag, so the per-step check
  // still makes no system call. 0 disables.
  double save_interval_seconds = 0;

  // --- Retention ---
  // Keep the newest `max_to_keep` committed steps; older ones are removed
  // after each commit. 0 keeps everything (use it when another component,
  // such as the node agent, manages the directory). Default 2.
  int max_to_keep = 2;
  // Reuse the files of the step that retention is about to remove as the
  // storage for the next save: overwriting allocated pages on tmpfs is ~4x
  // faster than allocating new ones. While such a save is in flight the
  // directory holds max_to_keep-1 committed steps plus the one being
  // written, so peak space is max_to_keep checkpoints instead of
  // max_to_keep+1. Only used when max_to_keep >= 2.
  bool recycle_space = true;

  // --- Save mechanics ---
  // true: Save() returns once the items are copied into reusable staging
  // memory; checksums, writes, fsync and commit run in the background.
  // false: Save() returns after the step is committed.
  bool async = true;
  // Threads for copying, checksumming, writing and reading. 0 = one per CPU,
  // at most 8 for saves (they run beside training) and uncapped for restores
  // (the trainer waits for them).
  int io_threads = 0;
  // Bytes covered by one checksum. Power of two in [4 KiB, 1 GiB].
  uint64_t chunk_size = 4ull << 20;

  // --- Preemption (on-demand checkpoints) ---
  // Signals that mean "a maintenance notice / preemption is coming". The
  // handler only sets a flag and then calls any handler installed before it
  // (a SIG_DFL or SIG_IGN disposition is not chained: the signal no longer
  // kills the process). Empty: install no handler.
  std::vector<int> preemption_signals = {SIGTERM};
  // After the on-demand checkpoint commits, Save() sets should_exit. The
  // library never calls exit() itself; a trainer that stops there has not
  // finished, and should exit with kExitAfterOnDemand so a supervisor
  // (`strata run`) restarts it at once.
  bool exit_after_ondemand = false;
  // How long the platform waits between the notice and killing the
  // process. An on-demand save that commits later than this is logged as a
  // missed deadline.
  std::chrono::seconds grace_period{300};

  // --- Node agent (one on-demand step for the whole job) ---
  // Where the node agent keeps its sync map ("" = `<dir>/.strata-agent`).
  // When one is there, a notice anywhere in the job makes every rank save
  // the same step: the one the agents agree on and publish in the map, read
  // with one atomic load per ShouldSave(). Set `use_agent` false to ignore
  // an agent. See docs/operations.md, "The maintenance flow".
  std::string agent_dir;
  bool use_agent = true;
  // A rank that got a notice itself saves its own next step when no sync
  // step is published within this time (no agent, or none reachable).
  std::chrono::milliseconds sync_timeout{10000};
  // Agent mode: the node agent owns the directory (retention is off, as if
  // max_to_keep were 0) and decides what to restore. Restore() and
  // RestoreInto() perform the replicator handshake for this job and restore
  // the step the agent put in place for this node: the newest step complete
  // for the whole job, fetched from a peer if this node lost it. A fresh
  // start is NOT_FOUND, as without an agent.
  std::optional<AgentJob> agent_job;

  // File-system access; nullptr = Env::Default(). Not owned.
  Env* env = nullptr;
};

// The exit code of a trainer that stopped after its on-demand checkpoint
// (EX_TEMPFAIL): not finished, restart it. `strata run` restarts such a run
// at once, without backoff, unless it forwarded the notice itself.
inline constexpr int kExitAfterOnDemand = 75;

struct SaveResult {
  int64_t step = 0;
  bool on_demand = false;    // this was the checkpoint requested by a notice
  bool committed = false;    // durable when Save() returned (sync or on-demand)
  bool should_exit = false;  // on_demand && committed && exit_after_ondemand
};

// How Save() treats the caller's items.
struct SaveOptions {
  // The items' memory is lent to the checkpointer for the whole save rather
  // than snapshotted: an async save does not copy it into staging memory,
  // and its background writer reads (checksums, writes) the caller's
  // buffers directly. The caller guarantees that every buffer stays valid
  // and unchanged until the save has finished: until Wait() or AwaitIdle()
  // returns, or the next Save() or Restore*() has begun (each waits for the
  // save in flight), or the Checkpointer is destroyed. For callers that fill
  // reusable memory of their own, such as a pinned host arena that device
  // tensors are copied into: one copy instead of two. Sync and on-demand
  // saves write from the caller's buffers anyway; for them it changes
  // nothing.
  bool borrowed = false;
  // If set, called once, before any byte of the items is read, on
  // the thread that reads them: for a borrowed async save the background
  // writer (Save() may return before the buffers are filled: `ready` waits
  // until they are, e.g. for device->host copies still in flight);
  // otherwise the thread calling Save(). A non-OK status fails the save with
  // it (nothing is written; reported as any failure of that save). Not
  // called when the save is refused before it starts (invalid items, the
  // previous save's failure). It must not call into this Checkpointer.
  std::function<Status()> ready;
};

// A step restored into buffers owned by the caller of Restore().
struct RestoredItem {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  std::span<std::byte> data;  // points into RestoredStep::storage
};

// Unmaps the memory of a restored step: one anonymous mapping with
// transparent huge pages (a restore into fresh memory is otherwise dominated
// by page faults).
struct RestoredMemoryDeleter {
  size_t size = 0;
  bool owned = true;  // false: the memory came from a RestoreAllocator
  void operator()(std::byte* p) const noexcept;
};

struct RestoredStep {
  int64_t step = 0;
  std::vector<RestoredItem> items;
  // Where `storage` maps the step's own files (a step verified in place on
  // a RAM disk): what keeps a save from recycling those files while the
  // step is held (a shared lock on its directory, released after `storage`
  // is unmapped). Empty otherwise.
  std::shared_ptr<const void> hold;
  std::unique_ptr<std::byte[], RestoredMemoryDeleter> storage;
  const RestoredItem* Find(std::string_view name) const;
};

struct RestoreOptions {
  // Restore exactly this step (no fallback); default: the newest that
  // verifies, falling back to older ones. Not with an agent_job: the agent
  // chooses the step.
  std::optional<int64_t> step;
  // Restore() and RestoreToMemory() only: called with the step being read
  // (`step` of the argument is set; its items all point to their memory)
  // and an item's index as soon as that item's bytes are read and verified,
  // so a caller can start using it (a host->device copy) while the rest is
  // read. Called from the reading threads, concurrently, smallest items
  // first. The step may still fail on another item: the engine then tries
  // an older step (RestoreAllocator is called again first) or fails, so
  // what was done with reported items must be redone or undone.
  std::function<void(const RestoredStep& reading, size_t item)> item_verified = nullptr;
  // As item_verified, per chunk of an item: called with the item's index
  // and the range of its bytes, [offset, offset + size), just verified
  // (while they are likely still in the CPU's cache), before item_verified
  // reports the item whose last chunk it was. Every chunk of a step read is
  // reported once. The same caveats: concurrent, and a later failure of
  // the step undoes nothing.
  std::function<void(const RestoredStep& reading, size_t item, uint64_t offset, uint64_t size)>
      chunk_verified = nullptr;
  // The item whose chunks are verified (and reported) before every other
  // item's (empty: none): the one a caller needs to use the rest, such as
  // a state tree that says where each item goes, so that it can act on it
  // while the rest is still read. A step without it is read as ever.
  std::string first_item = {};
};

// Memory for a restored step, instead of a fresh mapping (RestoreToMemory).
// Called with the number of bytes the step needs (its items at 64-byte
// aligned offsets) once per step tried, on the thread restoring, after any
// save in flight has finished. Returns memory of at least that size, 64-byte
// aligned, that the caller owns and keeps valid and untouched while the
// returned RestoredStep is used (RestoredStep::storage does not free it); an
// empty span, or one too small or misaligned, makes the engine allocate as
// without it. For restoring into page-locked memory that host->device copies
// read at full speed.
using RestoreAllocator = std::function<StatusOr<std::span<std::byte>>(size_t size)>;

// A snapshot of the checkpointer's state, for status displays.
struct CheckpointerStatus {
  std::optional<int64_t> in_flight_step;  // a background save not yet finished
  std::optional<int64_t> last_committed_step;
  Status last_error;                 // the newest save failure, until a save succeeds
  uint64_t notices = 0;              // preemption notices seen so far
  std::string agent_sync;            // the agent's sync map in use, "" if none
  std::optional<int64_t> sync_step;  // the job's on-demand step, not yet saved here
  uint64_t staging_bytes = 0;        // the checkpointer's own staging memory (0 until an
                                     // async save that is not borrowed needs it)
  bool borrowed_in_flight = false;   // the save in flight reads the caller's buffers
  // Saves written in place (CudaStager, strata.torch): the step files kept
  // mapped (a free one prepared ahead and the committed ones retention
  // will recycle), whether all are page-locked for device copies, and
  // whether memory for the next save is being prepared in the background.
  uint64_t mapped_bytes = 0;
  bool mapped_pinned = false;
  bool reserving = false;
};

class Checkpointer {
 public:
  // Opens (creating if needed) the checkpoint directory `dir`, takes an
  // exclusive lock on it (one Checkpointer per directory), removes leftover
  // temporary directories and installs the preemption handler.
  static StatusOr<std::unique_ptr<Checkpointer>> Open(const std::string& dir,
                                                      CheckpointerOptions options = {});

  // Waits for an in-flight save to finish (its failure is logged).
  virtual ~Checkpointer() = default;

  // True if `step` should be saved: the interval says so, or a preemption
  // notice is pending (with a node agent: the job's agreed sync step is
  // reached). No system call, no lock.
  virtual bool ShouldSave(int64_t step) const noexcept = 0;

  // Saves `items` as `step`. At most one save is in flight: a call made
  // while the previous async save is still running first waits for it. If
  // that previous save failed, its error (naming its step) is returned and
  // this save is not started; the error is then cleared, so calling again
  // retries. An on-demand save (a notice is pending) is written directly
  // from the caller's buffers and committed before Save returns, even in
  // async mode. Item names must be unique and valid (see types.h).
  // With options.borrowed the buffers are not snapshotted; see SaveOptions.
  virtual StatusOr<SaveResult> Save(int64_t step, std::span<const Item> items,
                                    const SaveOptions& options) = 0;
  StatusOr<SaveResult> Save(int64_t step, std::span<const Item> items) {
    return Save(step, items, SaveOptions());
  }

  // Waits until no save is in flight and returns its result (once; later
  // calls return OK).
  virtual Status Wait() = 0;

  // Waits until no save is in flight, without taking its result: a failure
  // is still returned by the next Save() or Wait(). For a caller about to
  // refill the buffers a borrowed save reads. Unlike Wait(), it may be
  // called from another thread while the training thread makes its calls.
  virtual void AwaitIdle() = 0;

  // Restores the newest step that verifies (with an agent_job: the step the
  // agent chose) into the caller's buffers. Every
  // item of the step must have a buffer with the same name, dtype, shape and
  // size, and every buffer an item (a mismatch is INVALID_ARGUMENT naming the
  // item; it is not treated as corruption). Corrupt or partial steps are
  // skipped with a log line naming the step, item and chunk. NOT_FOUND when
  // there is no step; DATA_LOSS, listing them, when there are steps and none
  // verifies (whether to start fresh then is the caller's decision).
  // Returns the restored step.
  virtual StatusOr<int64_t> RestoreInto(std::span<const MutableItem> into,
                                        const RestoreOptions& options = {}) = 0;
  // As RestoreInto, into memory owned by the returned value.
  virtual StatusOr<RestoredStep> Restore(const RestoreOptions& options = {}) = 0;
  // As Restore, into memory `allocate` lends (see RestoreAllocator).
  virtual StatusOr<RestoredStep> RestoreToMemory(const RestoreAllocator& allocate,
                                                 const RestoreOptions& options = {}) = 0;

  // Behaves as if a preemption signal had arrived. Async-signal-safe.
  virtual void RequestOnDemand() noexcept = 0;

  virtual CheckpointerStatus status() const = 0;
  virtual const std::string& dir() const = 0;
};

// Restores `dir/<step>` into the caller's buffers, verifying every chunk,
// without opening a Checkpointer (no lock, no retention, no fallback): for
// reading a directory another component manages, such as a step the node
// agent restored. Buffers must match as for RestoreInto. `threads` 0 = one
// per CPU.
StatusOr<int64_t> RestoreStepInto(const std::string& dir, int64_t step,
                                  std::span<const MutableItem> into, int threads = 0);

// As RestoreStepInto, into memory owned by the returned value.
StatusOr<RestoredStep> RestoreStep(const std::string& dir, int64_t step, int threads = 0);

// As RestoreStep, reading and verifying only the items named (in the
// step's order); NOT_FOUND names one the step lacks. For a small item of a
// big step (a state tree, DCP's metadata) without reading the rest.
StatusOr<RestoredStep> RestoreStepItems(const std::string& dir, int64_t step,
                                        std::span<const std::string> names, int threads = 0);

// Version of the library, e.g. "0.1.0".
const char* Version();

}  // namespace strata

#endif  // STRATA_CHECKPOINTER_H_
