// Copyright 2026 The Strata Authors.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>

#include "engine/step_io.h"
#include "engine/step_lock.h"
#include "format/manifest.h"
#include "util/file_util.h"
#include "util/hash.h"

namespace strata {
namespace {

// Opens every data file and checks its size against the manifest.
Status OpenDataFiles(Env* env, const std::string& step_dir, const StepInfo& info,
                     std::vector<std::unique_ptr<ReadableFile>>* files) {
  for (const auto& f : info.files) {
    std::string path = JoinPath(step_dir, f.name);
    STRATA_ASSIGN_OR_RETURN(auto file, env->OpenReadable(path));
    STRATA_ASSIGN_OR_RETURN(uint64_t size, file->Size());
    if (size != f.size) {
      return DataLossError(path + " is " + std::to_string(size) + " bytes, the manifest says " +
                           std::to_string(f.size));
    }
    files->push_back(std::move(file));
  }
  return Status::Ok();
}

std::string ChunkError(const std::string& step_dir, const StepInfo& info, const ChunkRef& t,
                       const std::string& what) {
  const ItemInfo& ii = info.items[t.item];
  return "step " + std::to_string(info.step) + " item \"" + ii.name + "\" chunk " +
         std::to_string(t.chunk) + " (" + JoinPath(step_dir, info.files[ii.file].name) +
         " offset " + std::to_string(ii.offset + t.chunk * info.chunk_size) + "): " + what;
}

// Reads one chunk into `dst` and checks it. `dst` holds the chunk's bytes.
Status ReadChunk(const std::vector<std::unique_ptr<ReadableFile>>& files,
                 const std::string& step_dir, const StepInfo& info, const ChunkRef& t,
                 std::byte* dst, uint64_t len) {
  const ItemInfo& ii = info.items[t.item];
  Status s = files[ii.file]->PRead(ii.offset + t.chunk * info.chunk_size, len, dst);
  if (!s.ok()) return DataLossError(ChunkError(step_dir, info, t, s.message()));
  if (Xxh3(dst, len) != ii.chunk_xxh3[t.chunk]) {
    return DataLossError(ChunkError(step_dir, info, t, "checksum mismatch"));
  }
  return Status::Ok();
}

uint64_t ChunkLen(const StepInfo& info, const ChunkRef& t) {
  const ItemInfo& ii = info.items[t.item];
  return std::min(info.chunk_size, ii.nbytes - t.chunk * info.chunk_size);
}

// The order chunks are verified in: the chunks of `first_item` (when the
// step has it), then the smallest items' first, so that whole items are
// reported early.
void SortChunks(const StepInfo& info, const std::string& first_item, std::vector<ChunkRef>* tasks) {
  std::stable_sort(tasks->begin(), tasks->end(), [&](const ChunkRef& a, const ChunkRef& b) {
    return info.items[a.item].nbytes < info.items[b.item].nbytes;
  });
  if (first_item.empty()) return;
  std::stable_partition(tasks->begin(), tasks->end(),
                        [&](const ChunkRef& t) { return info.items[t.item].name == first_item; });
}

}  // namespace

Status ReadStepData(
    Env* env, ThreadPool* pool, const std::string& step_dir, const StepInfo& info,
    std::span<std::byte* const> dst, const std::function<void(size_t item)>& verified,
    const std::function<void(size_t item, uint64_t offset, uint64_t size)>& chunk_verified,
    const std::string& first_item) {
  STRATA_ASSIGN_OR_RETURN(StepLock lock, StepLock::ForReading(step_dir));
  std::vector<std::unique_ptr<ReadableFile>> files;
  STRATA_RETURN_IF_ERROR(OpenDataFiles(env, step_dir, info, &files));
  std::vector<ChunkRef> tasks = ChunkRefs(info);
  // Chunks not yet verified, per item; an item is reported when its count
  // reaches zero (empty items at once).
  std::unique_ptr<std::atomic<uint64_t>[]> left;
  if (verified) {
    SortChunks(info, first_item, &tasks);
    left = std::make_unique<std::atomic<uint64_t>[]>(info.items.size());
    for (size_t i = 0; i < info.items.size(); ++i) left[i] = 0;
    for (const ChunkRef& t : tasks) ++left[t.item];
    for (size_t i = 0; i < info.items.size(); ++i) {
      if (left[i] == 0) verified(i);
    }
  }
  std::mutex mu;
  Status first_error;
  pool->ParallelFor(tasks.size(), [&](size_t i) {
    const ChunkRef& t = tasks[i];
    std::byte* out = dst[t.item] + t.chunk * info.chunk_size;
    Status s = ReadChunk(files, step_dir, info, t, out, ChunkLen(info, t));
    if (!s.ok()) {
      std::lock_guard<std::mutex> l(mu);
      if (first_error.ok()) first_error = s;
      return;
    }
    if (chunk_verified) chunk_verified(t.item, t.chunk * info.chunk_size, ChunkLen(info, t));
    if (verified && left[t.item].fetch_sub(1) == 1) verified(t.item);
  });
  return first_error;
}

namespace {

// Maps every data file of `info` read-only into one region
// (engine/file_region.h). The region is unmapped on failure.
Status MapDataFiles(Env* env, const std::string& step_dir, const StepInfo& info, HeldRegion* out) {
  std::vector<std::unique_ptr<ReadableFile>> files;
  STRATA_RETURN_IF_ERROR(OpenDataFiles(env, step_dir, info, &files));
  STRATA_ASSIGN_OR_RETURN(*out, ReserveFileRegion(info.files, "the data files of " + step_dir));
  for (size_t f = 0; f < files.size(); ++f) {
    if (info.files[f].size == 0) continue;
    auto mapped = files[f]->MapShared(info.files[f].size, out->region.data() + out->file_offset[f]);
    if (!mapped.ok()) {
      if (!out->region.empty()) ::munmap(out->region.data(), out->region.size());
      return mapped.status();
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<RestoredStep> VerifyMapped(Env* env, ThreadPool* pool, const std::string& step_dir,
                                    const StepInfo& info, const HeldRegion* held,
                                    const RestoreOptions& options) {
  HeldRegion mapped;
  RestoredStep out;
  out.step = info.step;
  const bool fresh = held == nullptr;
  if (fresh) {
    STRATA_ASSIGN_OR_RETURN(StepLock lock, StepLock::ForReading(step_dir));
    STRATA_RETURN_IF_ERROR(MapDataFiles(env, step_dir, info, &mapped));
    out.hold = std::make_shared<StepLock>(std::move(lock));
    out.storage = std::unique_ptr<std::byte[], RestoredMemoryDeleter>(
        mapped.region.data(), RestoredMemoryDeleter{mapped.region.size(), true});
    held = &mapped;
  } else {
    out.storage = std::unique_ptr<std::byte[], RestoredMemoryDeleter>(
        held->region.data(), RestoredMemoryDeleter{held->region.size(), false});
  }
  for (const ItemInfo& ii : info.items) {
    std::byte* p = held->region.data() + held->file_offset[ii.file] + ii.offset;
    out.items.push_back({ii.name, ii.dtype, ii.shape, std::span<std::byte>(p, ii.nbytes)});
  }
  std::vector<ChunkRef> tasks = ChunkRefs(info);
  SortChunks(info, options.first_item, &tasks);
  auto left = std::make_unique<std::atomic<uint64_t>[]>(info.items.size());
  for (size_t i = 0; i < info.items.size(); ++i) left[i] = 0;
  for (const ChunkRef& t : tasks) ++left[t.item];
  for (size_t i = 0; i < info.items.size(); ++i) {
    if (left[i] == 0 && options.item_verified) options.item_verified(out, i);
  }
  std::mutex mu;
  Status first_error;
  pool->ParallelFor(tasks.size(), [&](size_t i) {
    const ChunkRef& t = tasks[i];
    const std::byte* chunk = out.items[t.item].data.data() + t.chunk * info.chunk_size;
    // Each chunk's pages are faulted in by the thread that verifies it, so
    // the first chunks are verified (and copied on) while later ones are
    // still being mapped, not after the whole step is.
    if (fresh) FaultInForReading(chunk, ChunkLen(info, t));
    if (Xxh3(chunk, ChunkLen(info, t)) != info.items[t.item].chunk_xxh3[t.chunk]) {
      std::lock_guard<std::mutex> l(mu);
      if (first_error.ok()) {
        first_error = DataLossError(ChunkError(step_dir, info, t, "checksum mismatch"));
      }
      return;
    }
    if (options.chunk_verified) {
      options.chunk_verified(out, t.item, t.chunk * info.chunk_size, ChunkLen(info, t));
    }
    if (left[t.item].fetch_sub(1) == 1 && options.item_verified) options.item_verified(out, t.item);
  });
  STRATA_RETURN_IF_ERROR(first_error);
  return out;
}

void VerifyStepData(Env* env, ThreadPool* pool, const std::string& step_dir, const StepInfo& info,
                    VerifyReport* report) {
  auto lock = StepLock::ForReading(step_dir);
  std::vector<std::unique_ptr<ReadableFile>> files;
  Status opened = lock.ok() ? OpenDataFiles(env, step_dir, info, &files) : lock.status();
  if (!opened.ok()) {
    report->problems.push_back({"", -1, opened.message()});
    return;
  }
  std::vector<ChunkRef> tasks = ChunkRefs(info);
  std::mutex mu;
  pool->ParallelFor(tasks.size(), [&](size_t i) {
    thread_local std::unique_ptr<std::byte[]> scratch;
    thread_local uint64_t scratch_size = 0;
    if (scratch_size < info.chunk_size) {
      scratch = std::make_unique_for_overwrite<std::byte[]>(info.chunk_size);
      scratch_size = info.chunk_size;
    }
    const ChunkRef& t = tasks[i];
    uint64_t len = ChunkLen(info, t);
    Status s = ReadChunk(files, step_dir, info, t, scratch.get(), len);
    std::lock_guard<std::mutex> l(mu);
    if (s.ok()) {
      report->bytes_verified += len;
    } else {
      report->problems.push_back(
          {info.items[t.item].name, static_cast<int64_t>(t.chunk), s.message()});
    }
  });
  std::sort(report->problems.begin(), report->problems.end(),
            [](const VerifyProblem& a, const VerifyProblem& b) {
              return a.item != b.item ? a.item < b.item : a.chunk < b.chunk;
            });
}

Status MatchBuffers(const StepInfo& info, std::span<const MutableItem> into,
                    std::vector<std::byte*>* dst) {
  for (const ItemInfo& ii : info.items) {
    auto it = std::find_if(into.begin(), into.end(),
                           [&](const MutableItem& m) { return m.name == ii.name; });
    std::string where = "restoring step " + std::to_string(info.step) + " item \"" + ii.name + "\"";
    if (it == into.end()) return InvalidArgumentError(where + ": no buffer with that name");
    if (it->dtype != ii.dtype || it->shape != ii.shape || it->size != ii.nbytes) {
      return InvalidArgumentError(where + ": checkpoint has " + std::string(DTypeName(ii.dtype)) +
                                  ShapeString(ii.shape) + ", buffer is " +
                                  std::string(DTypeName(it->dtype)) + ShapeString(it->shape));
    }
    dst->push_back(static_cast<std::byte*>(it->data));
  }
  for (const MutableItem& m : into) {
    bool found = std::any_of(info.items.begin(), info.items.end(),
                             [&](const ItemInfo& ii) { return ii.name == m.name; });
    if (!found) {
      return InvalidArgumentError("restoring step " + std::to_string(info.step) + ": item \"" +
                                  m.name + "\" is not in the checkpoint");
    }
  }
  return Status::Ok();
}

}  // namespace strata
