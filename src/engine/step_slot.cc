// Copyright 2026 The Strata Authors.
#include "engine/step_slot.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "util/file_util.h"
#include "util/logging.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL
#endif

namespace strata {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

size_t PageRound(uint64_t n) { return (n + PageSize() - 1) & ~(PageSize() - 1); }

// Faults in every page of `region` for writing, in 64 MiB pieces on `pool`:
// a copy into fresh tmpfs pages otherwise takes a fault per page on the
// copying thread. Where the kernel has no MADV_POPULATE_WRITE, a store of
// each page's first byte (its own value) does it.
void Populate(ThreadPool* pool, std::span<std::byte> region) {
  constexpr size_t kPiece = 64 << 20;
  const size_t pieces = (region.size() + kPiece - 1) / kPiece;
  pool->ParallelFor(pieces, [&](size_t i) {
    std::byte* p = region.data() + i * kPiece;
    const size_t n = std::min(kPiece, region.size() - i * kPiece);
    if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
    for (size_t off = 0; off < n; off += PageSize()) {
      auto* b = reinterpret_cast<volatile std::byte*>(p + off);
      *b = *b;
    }
  });
}

// Makes `dir` hold exactly the data files of `layout` at their sizes.
Status ShapeFiles(Env* env, const std::string& dir, const StepInfo& layout) {
  STRATA_RETURN_IF_ERROR(env->CreateDir(dir));
  STRATA_ASSIGN_OR_RETURN(auto entries, env->ListDir(dir));
  std::set<std::string> wanted;
  for (const FileInfo& f : layout.files) wanted.insert(f.name);
  for (const DirEntry& e : entries) {
    if (!wanted.count(e.name)) STRATA_RETURN_IF_ERROR(env->RemoveAll(JoinPath(dir, e.name)));
  }
  for (const FileInfo& f : layout.files) {
    STRATA_ASSIGN_OR_RETURN(auto file, env->OpenWritable(JoinPath(dir, f.name)));
    STRATA_RETURN_IF_ERROR(file->Truncate(f.size));
    STRATA_RETURN_IF_ERROR(file->Close());
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<StepSlot>> StepSlot::Prepare(Env* env, ThreadPool* pool, std::string dir,
                                                      const StepInfo& layout,
                                                      MemoryRegistrar* registrar) {
  std::unique_ptr<StepSlot> slot(new StepSlot(std::move(dir), layout));
  Status s = ShapeFiles(env, slot->dir_, layout);
  if (s.ok()) s = slot->Map(env, pool);
  if (!s.ok()) return s.WithContext("preparing the step files in " + slot->dir_);
  slot->Register(registrar);
  return slot;
}

Status StepSlot::Map(Env* env, ThreadPool* pool) {
  size_t total = 0;
  for (const FileInfo& f : layout_.files) {
    file_offset_.push_back(total);
    total += PageRound(f.size);
  }
  if (total == 0) return Status::Ok();
  void* base =
      ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return ErrnoToStatus(errno, "reserving " + std::to_string(total) + " bytes of address space");
  }
  region_ = std::span<std::byte>(static_cast<std::byte*>(base), total);
  for (size_t f = 0; f < layout_.files.size(); ++f) {
    const std::string path = JoinPath(dir_, layout_.files[f].name);
    STRATA_ASSIGN_OR_RETURN(FileIdentity id, env->Identify(path));
    identity_.push_back(id);
    if (layout_.files[f].size == 0) continue;
    STRATA_ASSIGN_OR_RETURN(auto file, env->OpenWritable(path));
    STRATA_RETURN_IF_ERROR(
        file->MapShared(layout_.files[f].size, region_.data() + file_offset_[f]).status());
  }
  Populate(pool, region_);
  return Status::Ok();
}

StepSlot::~StepSlot() {
  Register(nullptr);
  if (!region_.empty()) ::munmap(region_.data(), region_.size());
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
  if (registered_ == registrar || region_.empty()) return;
  if (registered_ != nullptr) registered_->Unregister(region_.data());
  registered_ = nullptr;
  if (registrar == nullptr) return;
  Status s = registrar->Register(region_.data(), region_.size());
  if (!s.ok()) {
    Log()->warn(
        "cannot page-lock the {} bytes of the step files in {} ({}); device copies into "
        "them will be slower",
        region_.size(), dir_, s.message());
    return;
  }
  registered_ = registrar;
}

}  // namespace strata
