// Copyright 2026 The Strata Authors.
#include <algorithm>
#include <mutex>
#include <numeric>
#include <set>

#include "engine/step_io.h"
#include "engine/step_slot.h"
#include "format/manifest.h"
#include "format/naming.h"
#include "util/crash_point.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/time_format.h"

namespace strata {
namespace {

// Opens the data files in `tmp_dir` (reusing existing ones) at their final
// sizes, and removes data files the new layout does not use.
Status OpenDataFiles(Env* env, const std::string& tmp_dir, const StepInfo& info,
                     std::vector<std::unique_ptr<WritableFile>>* files) {
  STRATA_ASSIGN_OR_RETURN(auto entries, env->ListDir(tmp_dir));
  std::set<std::string> wanted;
  for (const auto& f : info.files) wanted.insert(f.name);
  for (const auto& e : entries) {
    if (!wanted.count(e.name)) STRATA_RETURN_IF_ERROR(env->RemoveAll(JoinPath(tmp_dir, e.name)));
  }
  for (const auto& f : info.files) {
    STRATA_ASSIGN_OR_RETURN(auto file, env->OpenWritable(JoinPath(tmp_dir, f.name)));
    STRATA_RETURN_IF_ERROR(file->Truncate(f.size));
    files->push_back(std::move(file));
  }
  return Status::Ok();
}

// Syncs and closes every file, in parallel; the first error wins.
Status SyncFiles(ThreadPool* pool, std::vector<std::unique_ptr<WritableFile>>& files) {
  std::mutex mu;
  Status first_error;
  pool->ParallelFor(files.size(), [&](size_t f) {
    Status s = files[f]->Sync();
    if (s.ok()) s = files[f]->Close();
    std::lock_guard<std::mutex> l(mu);
    if (!s.ok() && first_error.ok()) first_error = s;
  });
  return first_error;
}

// `refs` reordered to take the files in turn: a write holds its file's
// lock (a tmpfs file's inode lock, for the whole copy), so threads taking
// consecutive chunks of one file would wait on each other, spinning.
std::vector<ChunkRef> AlternateFiles(const StepInfo& info, const std::vector<ChunkRef>& refs) {
  std::vector<std::vector<ChunkRef>> by_file(info.files.size());
  for (const ChunkRef& r : refs) by_file[info.items[r.item].file].push_back(r);
  std::vector<ChunkRef> out;
  out.reserve(refs.size());
  for (size_t k = 0; out.size() < refs.size(); ++k) {
    for (const auto& chunks : by_file) {
      if (k < chunks.size()) out.push_back(chunks[k]);
    }
  }
  return out;
}

// Checksums and writes every chunk in parallel, then syncs every file.
Status WriteData(ThreadPool* pool, std::span<const Item> items, StepInfo* info,
                 std::vector<std::unique_ptr<WritableFile>>& files) {
  std::vector<ChunkRef> tasks = AlternateFiles(*info, ChunkRefs(*info));
  std::mutex mu;
  Status first_error;
  const size_t crash_at = tasks.size() / 2;
  pool->ParallelFor(tasks.size(), [&](size_t t) {
    if (t == crash_at) CrashPoint("save.mid_data");
    ItemInfo& ii = info->items[tasks[t].item];
    uint64_t off = tasks[t].chunk * info->chunk_size;
    uint64_t len = std::min(info->chunk_size, ii.nbytes - off);
    const auto* src = static_cast<const std::byte*>(items[tasks[t].item].data) + off;
    ii.chunk_xxh3[tasks[t].chunk] = Xxh3(src, len);
    Status s = files[ii.file]->PWrite(ii.offset + off, src, len);
    if (!s.ok()) {
      std::lock_guard<std::mutex> l(mu);
      if (first_error.ok()) first_error = s;
    }
  });
  STRATA_RETURN_IF_ERROR(first_error);
  return SyncFiles(pool, files);
}

// Moves an existing committed `final_dir` out of the way so the new one can
// take its name; returns the temporary name it now has (or "" if none).
StatusOr<std::string> MoveAsideExisting(Env* env, const std::string& dir,
                                        const std::string& final_dir, int64_t step) {
  if (!env->Exists(final_dir)) return std::string();
  std::string aside = JoinPath(dir, TempDirName(step));
  STRATA_RETURN_IF_ERROR(env->Rename(final_dir, aside));
  return aside;
}

// Writes the manifest into `tmp_dir`, whose data files are synced, and
// publishes it as dir/<step> (replacing an existing one).
Status PublishStep(Env* env, const std::string& dir, const std::string& tmp_dir,
                   const StepInfo& info) {
  std::string manifest = EncodeManifest(info);
  STRATA_RETURN_IF_ERROR(
      WriteFileSynced(env, JoinPath(tmp_dir, std::string(kManifestFileName)), manifest));
  CrashPoint("save.after_manifest");
  std::string final_dir = JoinPath(dir, StepDirName(info.step));
  STRATA_ASSIGN_OR_RETURN(std::string aside, MoveAsideExisting(env, dir, final_dir, info.step));
  STRATA_RETURN_IF_ERROR(CommitDir(env, tmp_dir, final_dir));
  if (!aside.empty()) env->RemoveAll(aside).IgnoreError();  // re-removed at next Open if this fails
  return Status::Ok();
}

Status WriteAndCommit(Env* env, ThreadPool* pool, const WriteStepRequest& req,
                      const std::string& tmp_dir, StepInfo* info) {
  std::vector<std::unique_ptr<WritableFile>> files;
  STRATA_RETURN_IF_ERROR(OpenDataFiles(env, tmp_dir, *info, &files));
  CrashPoint("save.before_data");
  STRATA_RETURN_IF_ERROR(WriteData(pool, req.items, info, files));
  CrashPoint("save.after_data");
  return PublishStep(env, req.dir, tmp_dir, *info);
}

// Checksums every chunk of the slot's items where they lie, in item order
// (the order their bytes arrive in), waiting for each item's bytes first.
Status ChecksumInPlace(ThreadPool* pool, StepSlot* slot,
                       const std::function<Status(size_t)>& item_ready) {
  StepInfo& info = slot->mutable_layout();
  std::vector<ChunkRef> tasks = ChunkRefs(info);
  std::mutex mu;
  Status first_error;
  pool->ParallelFor(tasks.size(), [&](size_t t) {
    const ChunkRef& c = tasks[t];
    Status s = item_ready ? item_ready(c.item) : Status::Ok();
    if (s.ok()) {
      ItemInfo& ii = info.items[c.item];
      const uint64_t off = c.chunk * info.chunk_size;
      ii.chunk_xxh3[c.chunk] =
          Xxh3(slot->data(c.item) + off, std::min(info.chunk_size, ii.nbytes - off));
      return;
    }
    std::lock_guard<std::mutex> l(mu);
    if (first_error.ok()) first_error = s;
  });
  return first_error;
}

// Opens the slot's data files to sync what was stored through the mapping.
Status SyncSlotFiles(Env* env, ThreadPool* pool, const StepSlot& slot) {
  std::vector<std::unique_ptr<WritableFile>> files;
  for (const FileInfo& f : slot.layout().files) {
    STRATA_ASSIGN_OR_RETURN(auto file, env->OpenWritable(JoinPath(slot.dir(), f.name)));
    files.push_back(std::move(file));
  }
  return SyncFiles(pool, files);
}

}  // namespace

std::vector<ChunkRef> ChunkRefs(const StepInfo& info) {
  std::vector<ChunkRef> refs;
  for (size_t i = 0; i < info.items.size(); ++i) {
    for (uint64_t c = 0; c < info.items[i].chunk_xxh3.size(); ++c) refs.push_back({i, c});
  }
  return refs;
}

Status ValidateItems(std::span<const Item> items, bool need_data) {
  std::set<std::string_view> names;
  for (const Item& it : items) {
    STRATA_RETURN_IF_ERROR(ValidateItemName(it.name));
    if (!names.insert(it.name).second) {
      return InvalidArgumentError("duplicate item name \"" + it.name + "\"");
    }
    if (DTypeName(it.dtype) == "invalid") {
      return InvalidArgumentError("item \"" + it.name + "\": invalid dtype");
    }
    auto bytes = ShapeBytes(it.dtype, it.shape);
    if (!bytes.ok()) return bytes.status().WithContext("item \"" + it.name + "\"");
    if (*bytes != it.size) {
      return InvalidArgumentError("item \"" + it.name + "\": " + std::to_string(it.size) +
                                  " bytes, but dtype " + std::string(DTypeName(it.dtype)) +
                                  " and shape " + ShapeString(it.shape) + " need " +
                                  std::to_string(*bytes));
    }
    if (need_data && it.size > 0 && it.data == nullptr) {
      return InvalidArgumentError("item \"" + it.name + "\": data is null");
    }
  }
  return Status::Ok();
}

StepInfo PlanStepLayout(std::span<const Item> items, uint64_t chunk_size, int max_files) {
  StepInfo info;
  info.format_version = kFormatVersion;
  info.chunk_size = chunk_size;
  size_t nfiles =
      std::clamp<size_t>(static_cast<size_t>(max_files), 1, std::max<size_t>(items.size(), 1));
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].size > items[b].size; });
  std::vector<uint64_t> load(nfiles, 0);
  std::vector<uint32_t> file_of(items.size());
  for (size_t i : order) {
    auto f = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    file_of[i] = f;
    load[f] += items[i].size;
  }
  std::vector<uint64_t> end(nfiles, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    ItemInfo ii{it.name, it.dtype, it.shape, it.size, file_of[i], end[file_of[i]], {}};
    ii.chunk_xxh3.resize(ChunkCount(it.size, chunk_size));
    end[file_of[i]] += it.size;
    info.items.push_back(std::move(ii));
  }
  for (size_t f = 0; f < nfiles; ++f) {
    info.files.push_back({DataFileName(static_cast<uint32_t>(f)), end[f]});
  }
  return info;
}

StatusOr<StepInfo> CommitSlot(Env* env, ThreadPool* pool, StepSlot* slot, const std::string& dir,
                              int64_t step, const std::function<Status(size_t)>& item_ready,
                              const std::function<Status()>& gate) {
  StepInfo& info = slot->mutable_layout();
  info.step = step;
  info.created_unix_ms = UnixMillisNow();
  CrashPoint("save.before_checksum");
  Status s = env->RemoveFile(JoinPath(slot->dir(), std::string(kManifestFileName)));
  if (s.ok()) s = ChecksumInPlace(pool, slot, item_ready);
  CrashPoint("save.after_data");
  if (s.ok() && gate) s = gate();
  if (s.ok()) s = SyncSlotFiles(env, pool, *slot);
  if (s.ok()) s = PublishStep(env, dir, slot->dir(), info);
  if (!s.ok()) return s.WithContext("saving step " + std::to_string(step) + " in " + dir);
  slot->Moved(JoinPath(dir, StepDirName(step)));
  return info;
}

StatusOr<StepInfo> WriteStep(Env* env, ThreadPool* pool, const WriteStepRequest& req) {
  StepInfo info = PlanStepLayout(req.items, req.chunk_size, req.max_files);
  info.step = req.step;
  info.created_unix_ms = UnixMillisNow();
  std::string tmp_dir = req.recycle_dir;
  Status s;
  if (tmp_dir.empty()) {
    tmp_dir = JoinPath(req.dir, TempDirName(req.step));
    s = env->CreateDir(tmp_dir);
  } else {
    s = env->RemoveFile(JoinPath(tmp_dir, std::string(kManifestFileName)));
  }
  if (s.ok()) s = WriteAndCommit(env, pool, req, tmp_dir, &info);
  if (!s.ok()) {
    env->RemoveAll(tmp_dir).IgnoreError();  // free the space; committed steps are untouched
    return s.WithContext("saving step " + std::to_string(req.step) + " in " + req.dir);
  }
  return info;
}

}  // namespace strata
