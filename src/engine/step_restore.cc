// Copyright 2026 The Strata Authors.
//
// Reading a step into memory: what Checkpointer::Restore* and the free
// functions of strata/checkpointer.h that read a directory without a
// Checkpointer share.
#include <algorithm>

#include "engine/staging.h"
#include "engine/step_io.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/ram_disk.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

// A reading pool of `threads` threads in all, the caller's among them (0:
// one per CPU).
int Workers(int threads) {
  return (threads > 0 ? threads : ThreadPool::DefaultThreads(1 << 10)) - 1;
}

}  // namespace

// Reads `steps_dir/<info.step>` into one allocation: `allocate`'s memory if
// it gives enough, aligned, else a mapping owned by `out`.
Status ReadOwned(Env* env, ThreadPool* pool, const std::string& steps_dir, const StepInfo& info,
                 const RestoreAllocator& allocate, RestoredStep* out,
                 const RestoreOptions& options) {
  // Every item starts on a 64-byte boundary, so views of any dtype are aligned.
  auto padded = [](uint64_t n) { return (n + 63) & ~uint64_t{63}; };
  uint64_t total = 0;
  for (const ItemInfo& ii : info.items) total += padded(ii.nbytes);
  const std::string what = "step " + std::to_string(info.step) + " of " + steps_dir;
  std::span<std::byte> lent;
  if (allocate) {
    STRATA_ASSIGN_OR_RETURN(lent, allocate(total));
    if (lent.size() < total || reinterpret_cast<uintptr_t>(lent.data()) % 64 != 0) {
      if (!lent.empty()) {
        Log()->warn(
            "restoring {}: the memory offered ({} bytes) is too small or not 64-byte "
            "aligned for {} bytes; allocating instead",
            what, lent.size(), total);
      }
      lent = {};
    }
  }
  if (!lent.empty()) {
    out->storage = std::unique_ptr<std::byte[], RestoredMemoryDeleter>(
        lent.data(), RestoredMemoryDeleter{lent.size(), false});
  } else {
    STRATA_ASSIGN_OR_RETURN(out->storage, AllocateRestoreMemory(total, what));
  }
  out->items.clear();
  std::vector<std::byte*> dst;
  std::byte* cursor = out->storage.get();
  for (const ItemInfo& ii : info.items) {
    out->items.push_back({ii.name, ii.dtype, ii.shape, std::span<std::byte>(cursor, ii.nbytes)});
    dst.push_back(cursor);
    cursor += padded(ii.nbytes);
  }
  out->step = info.step;
  std::function<void(size_t)> verified;
  if (options.item_verified) verified = [&](size_t i) { options.item_verified(*out, i); };
  std::function<void(size_t, uint64_t, uint64_t)> chunk;
  if (options.chunk_verified) {
    chunk = [&](size_t i, uint64_t offset, uint64_t size) {
      options.chunk_verified(*out, i, offset, size);
    };
  }
  return ReadStepData(env, pool, JoinPath(steps_dir, StepDirName(info.step)), info, dst, verified,
                      chunk, options.first_item);
}

StatusOr<int64_t> RestoreStepInto(const std::string& dir, int64_t step,
                                  std::span<const MutableItem> into, int threads) {
  STRATA_ASSIGN_OR_RETURN(StepInfo info, ReadStepInfo(dir, step));
  std::vector<std::byte*> dst;
  STRATA_RETURN_IF_ERROR(MatchBuffers(info, into, &dst));
  ThreadPool pool(Workers(threads));
  STRATA_RETURN_IF_ERROR(
      ReadStepData(Env::Default(), &pool, JoinPath(dir, StepDirName(step)), info, dst));
  return step;
}

StatusOr<RestoredStep> RestoreStep(const std::string& dir, int64_t step, int threads) {
  return ReadStepToMemory(dir, step, RestoreAllocator(), RestoreOptions(), threads);
}

StatusOr<RestoredStep> RestoreStepItems(const std::string& dir, int64_t step,
                                        std::span<const std::string> names, int threads) {
  STRATA_ASSIGN_OR_RETURN(StepInfo info, ReadStepInfo(dir, step));
  std::vector<ItemInfo> wanted;
  for (const ItemInfo& ii : info.items) {
    if (std::find(names.begin(), names.end(), ii.name) != names.end()) wanted.push_back(ii);
  }
  for (const std::string& name : names) {
    if (std::none_of(wanted.begin(), wanted.end(),
                     [&](const ItemInfo& ii) { return ii.name == name; })) {
      return NotFoundError("step " + std::to_string(step) + " in " + dir + " has no item \"" +
                           name + "\"");
    }
  }
  info.items = std::move(wanted);
  ThreadPool pool(Workers(threads));
  RestoredStep out;
  STRATA_RETURN_IF_ERROR(ReadOwned(Env::Default(), &pool, dir, info, RestoreAllocator(), &out));
  out.step = step;
  return out;
}

namespace {

// ReadStepToMemory, or with `in_place` ReadStepInPlace's mapping first.
StatusOr<RestoredStep> ReadStep(const std::string& dir, int64_t step,
                                const RestoreAllocator& allocate, const RestoreOptions& options,
                                int threads, bool in_place) {
  STRATA_ASSIGN_OR_RETURN(StepInfo info, ReadStepInfo(dir, step));
  ThreadPool pool(Workers(threads));
  if (in_place) {
    if (allocate) STRATA_RETURN_IF_ERROR(allocate(0).status());
    auto mapped = VerifyMapped(Env::Default(), &pool, JoinPath(dir, StepDirName(step)), info,
                               nullptr, options);
    if (mapped.status().code() != StatusCode::kUnimplemented) return mapped;
  }
  RestoredStep out;  // ReadOwned sets its step
  STRATA_RETURN_IF_ERROR(ReadOwned(Env::Default(), &pool, dir, info, allocate, &out, options));
  return out;
}

}  // namespace

StatusOr<RestoredStep> ReadStepToMemory(const std::string& dir, int64_t step,
                                        const RestoreAllocator& allocate,
                                        const RestoreOptions& options, int threads) {
  return ReadStep(dir, step, allocate, options, threads, /*in_place=*/false);
}

StatusOr<RestoredStep> ReadStepInPlace(const std::string& dir, int64_t step,
                                       const RestoreAllocator& allocate,
                                       const RestoreOptions& options, int threads) {
  return ReadStep(dir, step, allocate, options, threads, /*in_place=*/IsTmpfs(dir));
}

}  // namespace strata
