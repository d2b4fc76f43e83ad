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

#include "strata/catalog.h"
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

// Checks names (unique, valid), dtypes and that size == product(shape) *
// DTypeSize(dtype). Errors name the item.
Status ValidateItems(std::span<const Item> items);

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
// per item); with it the smallest items are read first.
Status ReadStepData(Env* env, ThreadPool* pool, const std::string& step_dir, const StepInfo& info,
                    std::span<std::byte* const> dst,
                    const std::function<void(size_t item)>& verified = {});

// Pairs every item of `info` with the caller's buffer of the same name,
// dtype, shape and size, appending each item's buffer to `dst` in the order
// of info.items; INVALID_ARGUMENT names the step and the first mismatch (an
// item without a buffer, a buffer without an item, a different dtype/shape).
Status MatchBuffers(const StepInfo& info, std::span<const MutableItem> into,
                    std::vector<std::byte*>* dst);

// Verifies every chunk of `step_dir` without keeping the data; appends one
// problem per corrupt chunk or unreadable file to `report`.
void VerifyStepData(Env* env, ThreadPool* pool, const std::string& step_dir, const StepInfo& info,
                    VerifyReport* report);

}  // namespace strata

#endif  // STRATA_ENGINE_STEP_IO_H_
