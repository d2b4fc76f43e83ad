// Copyright 2026 The Strata Authors.
//
// SlotPool: the step slots (engine/step_slot.h) of one checkpoint directory,
// and the policy that keeps the host memory of a state of S bytes with k
// steps kept at (k + 1) * S at most while no save sets memory up on its
// critical path:
//
//   * a committed step's slot stays mapped while retention may retire it
//     (max_to_keep > 0: the directory is the Checkpointer's), and when it
//     does, its files become the next save's (no new pages, no new
//     page-locking);
//   * at most one free slot: one prepared ahead (a reservation, or the
//     spare the Checkpointer prepares after a commit when the next save
//     could not recycle a step), or one a failed save gave back;
//   * where the directory is another's (the node agent's: max_to_keep 0),
//     a committed step's slot is unmapped at once: its files are the
//     agent's to prune.
//
// Thread-safe; Prepare and Acquire may take seconds (they make files and
// page-lock them) and hold no lock meanwhile.
#ifndef STRATA_ENGINE_SLOT_POOL_H_
#define STRATA_ENGINE_SLOT_POOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/step_io.h"
#include "engine/step_slot.h"
#include "strata/catalog.h"
#include "strata/env.h"
#include "strata/status.h"
#include "util/mutex.h"
#include "util/thread_pool.h"

namespace strata {

struct SlotPoolOptions {
  int max_to_keep = 2;        // 0: the directory is another's; keep nothing mapped
  bool recycle_space = true;  // a save may take the files of the step retention retires next
};

struct SlotStatus {
  uint64_t mapped_bytes = 0;  // free and committed slots mapped
  bool pinned = false;        // every mapped slot is page-locked
  int slots = 0;
};

class SlotPool {
 public:
  SlotPool(Env* env, ThreadPool* pool, std::string dir, SlotPoolOptions options)
      : env_(env), pool_(pool), dir_(std::move(dir)), options_(options) {}
  // Unmaps every slot; removes the free one's files (committed steps stay).
  ~SlotPool();

  // Page-locks every slot, now and later, with `registrar` (nullptr unlocks
  // them all). It must stay valid until replaced.
  void SetRegistrar(MemoryRegistrar* registrar) EXCLUDES(mu_);

  // A slot laid out as `layout` for saving `step`: the free one if it fits
  // (or reshaped), else the files of the oldest committed step when
  // retention would retire it at this save's commit (recycle_space, at
  // least max_to_keep >= 2 steps committed, all older than `step`) and no
  // reader holds it (engine/step_lock.h), else new files. REQUIRES: no save
  // of this directory is in flight.
  StatusOr<std::unique_ptr<StepSlot>> Acquire(int64_t step, const StepInfo& layout) EXCLUDES(mu_);

  // A slot that was not committed (its copies failed, its save was refused,
  // its commit failed): kept as the free slot if there is none, else its
  // files are removed.
  void GiveBack(std::unique_ptr<StepSlot> slot) EXCLUDES(mu_);

  // `slot` was committed as `step`: kept mapped for recycling, or unmapped
  // when the directory is another's.
  void Committed(int64_t step, std::unique_ptr<StepSlot> slot) EXCLUDES(mu_);

  // Retention drops `step`: if its slot is held, no free slot exists and no
  // reader holds the step (engine/step_lock.h), the step is renamed out of
  // the step namespace and becomes the free slot (returns true: the caller
  // must not remove it); else its slot, if any, is unmapped and false
  // returned.
  StatusOr<bool> TakeRetired(int64_t step) EXCLUDES(mu_);

  // Where committed `step`'s files are mapped, if a slot holds them still
  // (their manifest `info`'s files): for verifying and reading it in
  // place. Valid until the next save or reservation.
  std::optional<HeldRegion> Held(int64_t step, const StepInfo& info) const EXCLUDES(mu_);

  // Makes a free slot for `layout` unless one fits already, or the next
  // save will take the files of the step retention retires, which fit.
  Status Prepare(const StepInfo& layout) EXCLUDES(mu_);

  // True if a save after `committed` committed steps could take no slot
  // without making files: no free slot, and nothing retention retires.
  bool NeedsSpare(size_t committed) const EXCLUDES(mu_);

  SlotStatus status() const EXCLUDES(mu_);

 private:
  // Prepares `layout` in `dir` (a temporary directory), reusing its files.
  StatusOr<std::unique_ptr<StepSlot>> Make(std::string dir, const StepInfo& layout) EXCLUDES(mu_);
  // The oldest committed step's directory renamed to a temporary one, as a
  // slot (its own if held, else its files reshaped); null when a save of
  // `step` retires nothing. RESOURCE_EXHAUSTED, the step kept, when its
  // files would have to grow beyond the RAM disk's room
  // (StepSlot::CheckRoom).
  StatusOr<std::unique_ptr<StepSlot>> RetireOldest(int64_t step, const StepInfo& layout)
      EXCLUDES(mu_);
  // Unmaps `slot` and removes its (temporary) directory.
  void Discard(std::unique_ptr<StepSlot> slot);
  bool Holds() const { return options_.max_to_keep > 0; }

  Env* const env_;
  ThreadPool* const pool_;
  const std::string dir_;
  const SlotPoolOptions options_;

  mutable Mutex mu_;
  MemoryRegistrar* registrar_ GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<StepSlot> free_ GUARDED_BY(mu_);
  std::map<int64_t, std::unique_ptr<StepSlot>> held_ GUARDED_BY(mu_);  // by committed step
};

}  // namespace strata

#endif  // STRATA_ENGINE_SLOT_POOL_H_
