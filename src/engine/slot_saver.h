// Copyright 2026 The Strata Authors.
//
// SlotSaver: the Checkpointer's saves whose bytes the caller copies straight
// into the step's own files (engine/step_slot.h), as CudaStager does. The
// interface between the two; not public: trainers use CudaStager.
//
//   auto* saver = SlotSaverOf(ckpt);                     // null: copy path
//   saver->ReserveSlot(layout);                          // ahead, background
//   ...
//   auto slot = saver->AcquireSlot(step, layout);        // waits for the save in flight
//   ... copy each item to slot->data(i) ...
//   saver->SaveSlot(step, std::move(*slot), item_ready); // checksums, commits
//
// Thread safety: as Checkpointer's Save (one thread drives saves);
// slot_status() from any thread.
#ifndef STRATA_ENGINE_SLOT_SAVER_H_
#define STRATA_ENGINE_SLOT_SAVER_H_

#include <functional>
#include <memory>

#include "engine/slot_pool.h"
#include "engine/step_slot.h"
#include "strata/checkpointer.h"

namespace strata {

struct SlotSaverStatus : SlotStatus {
  bool reserving = false;  // a slot is being prepared in the background
};

class SlotSaver {
 public:
  virtual ~SlotSaver() = default;

  // Where `items` (validated; data not read) go in a step of this
  // directory: PlanStepLayout with its chunk size and file count.
  virtual StepInfo Layout(std::span<const Item> items) const = 0;

  // Whether the step files are on a filesystem kept in memory (tmpfs). Only
  // such files may be page-locked for device copies: the kernel does not
  // see a device's writes to page-locked file pages, and a filesystem that
  // writes pages back to a disk may then sync a step without them.
  virtual bool FilesInMemory() const = 0;

  // Page-locks every slot, now and later, with `registrar`; nullptr unlocks
  // them all. It must stay valid until replaced. Waits for the save and the
  // reservation in flight.
  virtual void SetRegistrar(MemoryRegistrar* registrar) = 0;

  // Prepares a slot for steps laid out as `layout` (PlanStepLayout of the
  // state's items) on the saver's thread, unless a free one fits: the next
  // AcquireSlot of that layout then sets nothing up. Returns at once; a
  // failure is logged (AcquireSlot then makes the files itself).
  virtual void ReserveSlot(const StepInfo& layout) = 0;

  // Waits for the save (and reservation) in flight, then returns the slot
  // for saving `step` laid out as `layout` (see SlotPool::Acquire). Errors
  // name the directory.
  virtual StatusOr<std::unique_ptr<StepSlot>> AcquireSlot(int64_t step, const StepInfo& layout) = 0;

  // Gives back a slot that will not be saved (its copies failed).
  virtual void ReleaseSlot(std::unique_ptr<StepSlot> slot) = 0;

  // Saves the filled slot as `step` with Save()'s policy: the previous
  // save's failure is returned first (the slot is kept for the next save);
  // an on-demand or synchronous save commits before returning; otherwise
  // the checksums and the commit run on the saver's thread. `item_ready(i)`
  // is called before item i's bytes are read (CommitSlot): it waits for
  // copies still landing and fails the save with its error; `gate` as for
  // CommitSlot. A slot that is not committed (refused here, or its save
  // failed) is given back to the pool, which may unmap it, only after
  // `item_ready` was called for every item: nothing writes it then.
  virtual StatusOr<SaveResult> SaveSlot(int64_t step, std::unique_ptr<StepSlot> slot,
                                        std::function<Status(size_t)> item_ready,
                                        std::function<Status()> gate) = 0;

  // As Checkpointer::RestoreToMemory, but a step of this directory is
  // verified where its files are -- in the slot that holds them when one
  // does (page-locked: a device copy reads them at full speed), else in a
  // read-only mapping of them -- and not read into other memory. The
  // returned step points into that memory: the slot's stays valid until
  // the next save or reservation (RestoredStep::storage does not own it),
  // a mapping as long as the step. `begin_attempt(0)`, if set, is called
  // before each step is tried (its memory is ignored). Steps the node agent
  // put in place (agent_job) are read as RestoreToMemory reads them.
  virtual StatusOr<RestoredStep> RestoreMapped(const RestoreAllocator& begin_attempt,
                                               const RestoreOptions& options) = 0;

  virtual SlotSaverStatus slot_status() const = 0;
};

// The SlotSaver of a Checkpointer that Checkpointer::Open returned; nullptr
// for another implementation (its callers copy through staging memory).
SlotSaver* SlotSaverOf(Checkpointer* ckpt);

}  // namespace strata

#endif  // STRATA_ENGINE_SLOT_SAVER_H_
