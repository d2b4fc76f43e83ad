// Copyright 2026 The Strata Authors.
//
// Writing and reading one step directory. These functions implement the
// on-disk format of docs/format.md; the Checkpointer adds policy on top.
#ifndef STRATA_ENGINE_STEP_IO_H_
#define STRATA_ENGINE_STEP_IO_H_

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/file_region.h"
#include "strata/catalog.h"
#include "strata/checkpointer.h"
#include "strata/env.h"
#include "strata/status.h"
#include "strata/types.h"
#include "util/thread_pool.h"

namespace strata {

struct WriteStepRequest {
  std::string dir;  // the checkpoint directory (parent of <step>/)
  int64_t step = 0;
  std::span<const Item> items;  // validated; data valid until WriteStep returns
  uint64_t chunk_size = 4ull << 20;
  int max_files = 1;  // data files to spread the items over
  // Optional: a temporary directory (already renamed out of the step
  // namespace) whose data files may be overwritten instead of allocating
  // new space. It becomes the new step's directory.
  std::string recycle_dir;
};

// One chunk of one item: the unit of parallel work for writing, reading
// and verifying a step.
struct ChunkRef {
  size_t item;
  uint64_t chunk;
};
// Every chunk of every item of `info`, in manifest order.
std::vector<ChunkRef> ChunkRefs(const StepInfo& info);

// Checks names (unique, valid), dtypes, that size == product(shape) *
// DTypeSize(dtype) and, with `need_data`, that data is set. Errors name the
// item.
Status ValidateItems(std::span<const Item> items, bool need_data = true);

// Where `items` go in a step's data files: assigned to at most `max_files`
// files balancing bytes (largest item first to the emptiest file), packed
// back to back in item order within each file. `step`, `created_unix_ms`
// and the chunk checksums are left for the writer.
StepInfo PlanStepLayout(std::span<const Item> items, uint64_t chunk_size, int max_files);

// Commits a slot whose items' bytes are in place (StepSlot) as dir/<step>:
// checksums every chunk where it lies, on `pool`, in item order (calling
// `item_ready(i)`, if set, before reading item i: it may block until the
// item's bytes have landed, and is called once per chunk, from several
// threads), syncs the data files, writes the manifest and commits with the
// protocol of WriteStep (an existing dir/<step> is replaced). On success
// slot->dir() is dir/<step>; on failure the slot stays in its temporary
// directory (committed steps untouched). `gate`, if set, is called after
// the checksums and before anything is published: its error fails the
// commit. Returns the manifest written.
class StepSlot;
StatusOr<StepInfo> CommitSlot(Env* env, ThreadPool* pool, StepSlot* slot, const std::string& dir,
                              int64_t step, const std::function<Status(size_t)>& item_ready,
                              const std::function<Status()>& gate);

// Writes `req.items` as dir/<step>/ with the commit protocol: data files and
// manifest under a temporary name, fsync, rename, fsync dir. Replaces an
// existing dir/<step>. On failure removes everything it created and leaves
// every committed step as it was. Returns the manifest written.
StatusOr<StepInfo> WriteStep(Env* env, ThreadPool* pool, const WriteStepRequest& req);

// Reads every item of `info` (the manifest of `step_dir`) into dst[i]
// (info.items[i].nbytes bytes each), verifying every chunk. The first
// corruption is DATA_LOSS naming the step, item, chunk and file.
// `verified`, if set, is called with an item's index once all its bytes are
// in dst and verified (from the reading threads, concurrently, at most once
// per item); with it the smallest items are read first, after the item
// named `first_item` (if any). `chunk_verified`, if set, is called likewise
// with each chunk's range of its item once the chunk is in dst and
// verified, before `verified` reports the item.
Status ReadStepData(
    Env* env, ThreadPool* pool, const std::string& step_dir, const StepInfo& info,
    std::span<std::byte* const> dst, const std::function<void(size_t item)>& verified = {},
    const std::function<void(size_t item, uint64_t offset, uint64_t size)>& chunk_verified = {},
    const std::string& first_item = "");

// Pairs every item of `info` with the caller's buffer of the same name,
// dtype, shape and size, appending each item's buffer to `dst` in the order
// of info.items; INVALID_ARGUMENT names the step and the first mismatch (an
// item without a buffer, a buffer without an item, a different dtype/shape).
Status MatchBuffers(const StepInfo& info, std::span<const MutableItem> into,
                    std::vector<std::byte*>* dst);

// Reads `steps_dir/<info.step>` (every item of `info`, verified) into one
// allocation, each item at a 64-byte aligned offset: `allocate`'s memory if
// it gives enough, aligned, else a mapping `out` owns. Calls
// options.chunk_verified and item_verified as chunks and items verify.
Status ReadOwned(Env* env, ThreadPool* pool, const std::string& steps_dir, const StepInfo& info,
                 const RestoreAllocator& allocate, RestoredStep* out,
                 const RestoreOptions& options = {});

// Verifies `step_dir` (a committed step, manifest `info`) where its bytes
// are, without reading them into other memory: in `held` (the region a
// StepSlot keeps the step's files mapped in, with the offset of each file
// in it), or else in a read-only mapping of its data files made here
// (engine/file_region.h), whose pages each chunk's thread faults in just
// before it reads them. Each chunk is checksummed in place on `pool`,
// smallest items first, and reported to options.chunk_verified; an item is
// reported to options.item_verified as soon as its chunks verify. The
// returned step's items point into that memory: a mapping its storage
// unmaps, or the slot's region, which it does not own. UNIMPLEMENTED where
// the Env cannot map files (read them instead). The first corruption is
// DATA_LOSS naming the step, item, chunk and file.
StatusOr<RestoredStep> VerifyMapped(Env* env, ThreadPool* pool, const std::string& step_dir,
                                    const StepInfo& info, const HeldRegion* held,
                                    const RestoreOptions& options);

// RestoreStep (strata/checkpointer.h) into the memory `allocate` lends (as
// for RestoreToMemory), calling options.item_verified as items verify.
StatusOr<RestoredStep> ReadStepToMemory(const std::string& dir, int64_t step,
                                        const RestoreAllocator& allocate,
                                        const RestoreOptions& options, int threads);

// As ReadStepToMemory, but a step on a memory file system (a tmpfs: the
// RAM disk) is verified where its files are, in a read-only mapping
// (VerifyMapped), not read into other memory; `allocate(0)` is called
// first (its memory is not used). Elsewhere -- on a disk, where a read
// error under a mapping would be a signal, not a Status -- or where the
// file system cannot map, it is read as ReadStepToMemory reads it. The
// returned step owns its memory; its files must not be rewritten while it
// is held.
StatusOr<RestoredStep> ReadStepInPlace(const std::string& dir, int64_t step,
                                       const RestoreAllocator& allocate,
                                       const RestoreOptions& options, int threads);

// Verifies every chunk of `step_dir` without keeping the data; appends one
// problem per corrupt chunk or unreadable file to `report`.
void VerifyStepData(Env* env, ThreadPool* pool, const std::string& step_dir, const StepInfo& info,
                    VerifyReport* report);

}  // namespace strata

#endif  // STRATA_ENGINE_STEP_IO_H_
