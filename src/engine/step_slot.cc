// Copyright 2026 The Strata Authors.
#include "engine/step_slot.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <set>

#include "util/file_util.h"
#include "util/logging.h"
#include "util/ram_disk.h"

namespace strata {
namespace {

// StepSlot::CheckRoom, `entries` being what `dir` holds.
Status CheckRoomBeside(const std::string& dir, const std::vector<DirEntry>& entries,
                       const StepInfo& layout) {
  if (!OnMemoryFilesystem(Dirname(dir))) return Status::Ok();  // a disk's room is its own
  uint64_t needed = 0;
  for (const FileInfo& f : layout.files) needed += PageRound(f.size);
  uint64_t held = 0;
  for (const DirEntry& e : entries) held += BytesHeld(JoinPath(dir, e.name));
  if (needed <= held) return Status::Ok();
  Status s = CheckFreeSpace(Dirname(dir), needed - held, "the step files");
  if (s.ok() || held == 0) return s;
  return s.WithContext(std::to_string(held) + " of their " + std::to_string(needed) +
                       " bytes held already");
}

// Makes `dir` hold exactly the data files of `layout` at their sizes.
Status ShapeFiles(Env* env, const std::string& dir, const StepInfo& layout) {
  STRATA_RETURN_IF_ERROR(env->CreateDir(dir));
  STRATA_ASSIGN_OR_RETURN(auto entries, env->ListDir(dir));
  STRATA_RETURN_IF_ERROR(CheckRoomBeside(dir, entries, layout));
  std::set<std::string> wanted;
  for (const FileInfo& f : layout.files) wanted.insert(f.name);
  for (const DirEntry& e : entries) {
    if (!wanted.count(e.name)) STRATA_RETURN_IF_ERROR(env->RemoveAll(JoinPath(dir, e.name)));
  }
  for (const FileInfo& f : layout.files) {
    STRATA_ASSIGN_OR_RETURN(auto file, env->OpenWritable(JoinPath(dir, f.name)));
    STRATA_RETURN_IF_ERROR(file->Truncate(f.size));
    // Where populating cannot report a full file system, room first: it is
    // then an error here, not a SIGBUS at a store into the mapping. Not
    // elsewhere: on a tmpfs with 4 KiB pages it costs a fifth more than
    // populating alone (docs/performance.md).
    if (!PopulatesForWriting()) {
      Status room = file->Allocate(f.size);
      if (!room.ok() && room.code() != StatusCode::kUnimplemented) return room;
    }
    STRATA_RETURN_IF_ERROR(file->Close());
  }
  return Status::Ok();
}

// Says once per process when the step files are on a tmpfs that gives them
// 4 KiB pages (engine/file_region.h).
void LogRamDisk(const std::string& dir) {
  static std::once_flag once;
  std::call_once(once, [&] {
    const RamDisk ram = DescribeRamDisk(dir);
    if (!ram.tmpfs || ram.HugePages() || ram.huge == "advise") return;
    Log()->info(
        "the step files in {} are on a tmpfs with 4 KiB pages (huge={}): mounted with "
        "huge=within_size, they are made, mapped after a restart and unmapped several times "
        "faster (docs/python.md, \"The RAM disk\")",
        dir, ram.huge.empty() ? "unknown" : ram.huge);
  });
}

}  // namespace

Status StepSlot::CheckRoom(Env* env, const std::string& dir, const StepInfo& layout) {
  std::vector<DirEntry> entries;
  if (env->Exists(dir)) {
    STRATA_ASSIGN_OR_RETURN(entries, env->ListDir(dir));
  }
  return CheckRoomBeside(dir, entries, layout);
}

StatusOr<std::unique_ptr<StepSlot>> StepSlot::Prepare(Env* env, ThreadPool* pool, std::string dir,
                                                      const StepInfo& layout,
                                                      MemoryRegistrar* registrar) {
  std::unique_ptr<StepSlot> slot(new StepSlot(std::move(dir), layout));
  Status s = ShapeFiles(env, slot->dir_, layout);
  if (s.ok()) LogRamDisk(Dirname(slot->dir_));
  if (s.ok()) s = slot->Map(env, pool);
  if (!s.ok()) return s.WithContext("preparing the step files in " + slot->dir_);
  slot->Register(registrar);
  return slot;
}

Status StepSlot::Map(Env* env, ThreadPool* pool) {
  STRATA_ASSIGN_OR_RETURN(HeldRegion held, ReserveFileRegion(layout_.files, "step files"));
  region_ = held.region;
  file_offset_ = held.file_offset;
  for (size_t f = 0; f < layout_.files.size(); ++f) {
    const std::string path = JoinPath(dir_, layout_.files[f].name);
    STRATA_ASSIGN_OR_RETURN(FileIdentity id, env->Identify(path));
    identity_.push_back(id);
    if (layout_.files[f].size == 0) continue;
    STRATA_ASSIGN_OR_RETURN(auto file, env->OpenWritable(path));
    STRATA_RETURN_IF_ERROR(
        file->MapShared(layout_.files[f].size, region_.data() + file_offset_[f]).status());
  }
  files_ = FileSpans(held, layout_.files);
  for (std::span<std::byte> s : files_) {
    // A tmpfs mounted with huge=advise backs them with huge pages (advisory).
    ::madvise(s.data(), s.size(), MADV_HUGEPAGE);
  }
  return PopulateForWriting(pool, files_, "the step files");
}

StepSlot::~StepSlot() {
  Register(nullptr);
  if (!region_.empty()) ::munmap(region_.data(), region_.size());
}

size_t StepSlot::bytes() const {
  size_t n = 0;
  for (std::span<std::byte> s : files_) n += s.size();
  return n;
}

std::byte* StepSlot::data(size_t item) const {
  const ItemInfo& ii = layout_.items[item];
  return region_.data() + file_offset_[ii.file] + ii.offset;
}

bool StepSlot::Fits(const StepInfo& layout) const {
  if (layout.files.size() != layout_.files.size()) return false;
  for (size_t f = 0; f < layout.files.size(); ++f) {
    if (layout.files[f].name != layout_.files[f].name ||
        layout.files[f].size != layout_.files[f].size) {
      return false;
    }
  }
  return true;
}

bool StepSlot::Intact(Env* env) const {
  for (size_t f = 0; f < layout_.files.size(); ++f) {
    auto id = env->Identify(JoinPath(dir_, layout_.files[f].name));
    if (!id.ok() || id->device != identity_[f].device || id->inode != identity_[f].inode ||
        id->size != layout_.files[f].size) {
      return false;
    }
  }
  return true;
}

void StepSlot::Register(MemoryRegistrar* registrar) {
  if (registered_ == registrar || files_.empty()) return;
  if (registered_ != nullptr) {
    for (std::span<std::byte> s : files_) registered_->Unregister(s.data());
  }
  registered_ = nullptr;
  if (registrar == nullptr) return;
  // File by file: the region's gaps between them are not memory.
  for (size_t f = 0; f < files_.size(); ++f) {
    Status s = registrar->Register(files_[f].data(), files_[f].size());
    if (s.ok()) continue;
    while (f > 0) registrar->Unregister(files_[--f].data());
    Log()->warn(
        "cannot page-lock the {} bytes of the step files in {} ({}); device copies into "
        "them will be slower",
        bytes(), dir_, s.message());
    return;
  }
  registered_ = registrar;
}

}  // namespace strata
