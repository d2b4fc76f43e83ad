// Copyright 2026 The Strata Authors.
//
// StepSlot: a step's data files made ahead of the save and mapped into one
// region of the process's memory, so that a save copies each item straight
// into the pages the RAM tier keeps (a GPU's device->host copies land
// there), checksums them in place and commits the directory with the usual
// protocol (docs/format.md). No staging copy, and no second pass that
// writes: the state is in host memory once.
//
// A slot outlives the step it held. When retention retires that step, its
// directory becomes a temporary one again, and the same files, mapping and
// page-locking serve the next save: the memory is set up once per job, not
// once per save.
//
// Not thread-safe: the Checkpointer hands a slot to one owner at a time.
#ifndef STRATA_ENGINE_STEP_SLOT_H_
#define STRATA_ENGINE_STEP_SLOT_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/file_region.h"
#include "strata/catalog.h"
#include "strata/env.h"
#include "strata/status.h"
#include "util/thread_pool.h"

namespace strata {

// Page-locks host memory for device copies (CudaStager registers it with
// CUDA). Register may be slow (it pins every page); it is never called on
// a save's critical path when the slot was reserved ahead. Thread-safe.
class MemoryRegistrar {
 public:
  virtual ~MemoryRegistrar() = default;
  virtual Status Register(void* p, size_t n) = 0;
  virtual void Unregister(void* p) = 0;
};

class StepSlot {
 public:
  // RESOURCE_EXHAUSTED when the memory file system holding `dir` has no
  // room for the pages of `layout` beyond those the files already in `dir`
  // (which need not exist) hold: checked before a page is made, so that a
  // save that cannot fit does not fill a RAM disk others write to. OK on a
  // disk, and where the file system reports no size.
  static Status CheckRoom(Env* env, const std::string& dir, const StepInfo& layout);

  // Makes `dir` (a temporary directory in the checkpoint directory, created
  // if missing) hold exactly the data files of `layout`, at their sizes
  // (files already there are reused: their pages are overwritten, not
  // allocated again; others are removed), maps them into one region, faults
  // its pages in (on `pool`) and, with a `registrar`, page-locks it. A
  // failed page-lock is logged and leaves the slot unlocked: copies into it
  // still work, device copies are slower. Errors name the directory.
  static StatusOr<std::unique_ptr<StepSlot>> Prepare(Env* env, ThreadPool* pool, std::string dir,
                                                     const StepInfo& layout,
                                                     MemoryRegistrar* registrar);

  // Unlocks and unmaps; the files stay where they are.
  ~StepSlot();
  StepSlot(const StepSlot&) = delete;
  StepSlot& operator=(const StepSlot&) = delete;

  // Where the files are now: a temporary directory, or the step's once
  // committed (Moved() follows every rename).
  const std::string& dir() const { return dir_; }
  void Moved(std::string dir) { dir_ = std::move(dir); }

  // The files and where each item lies in them; chunk checksums once
  // committed.
  const StepInfo& layout() const { return layout_; }
  StepInfo& mutable_layout() { return layout_; }
  std::byte* data(size_t item) const;
  // The bytes of memory mapped (the files, each rounded up to the page),
  // the region holding them (engine/file_region.h: gaps between files are
  // address space only), and where each file is in it.
  size_t bytes() const;
  std::span<std::byte> region() const { return region_; }
  const std::vector<size_t>& file_offsets() const { return file_offset_; }
  bool registered() const { return registered_ != nullptr; }

  // True if `layout` has the same files with the same sizes: the slot can
  // hold it after Relayout(), without preparing anything.
  bool Fits(const StepInfo& layout) const;
  // REQUIRES: Fits(layout).
  void Relayout(const StepInfo& layout) { layout_ = layout; }

  // True while dir()'s data files are the ones mapped: nobody removed or
  // replaced them (a step the node agent pruned, say).
  bool Intact(Env* env) const;

  // Page-locks the files' mappings with `registrar`, one call each
  // (nullptr: unlocks them). A failure is logged and leaves them unlocked.
  void Register(MemoryRegistrar* registrar);

 private:
  StepSlot(std::string dir, StepInfo layout) : dir_(std::move(dir)), layout_(std::move(layout)) {}
  Status Map(Env* env, ThreadPool* pool);

  std::string dir_;
  StepInfo layout_;
  std::span<std::byte> region_;              // one reservation holding every file's mapping
  std::vector<size_t> file_offset_;          // of each file in region_ (huge-page-aligned)
  std::vector<std::span<std::byte>> files_;  // each non-empty file's mapping in region_
  std::vector<FileIdentity> identity_;       // of each file, when mapped
  MemoryRegistrar* registered_ = nullptr;    // non-null iff every file is page-locked
};

}  // namespace strata

#endif  // STRATA_ENGINE_STEP_SLOT_H_
