// Copyright 2026 The Strata Authors.
#include "engine/staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace strata {
namespace {

// An anonymous private mapping of `size` bytes with transparent huge pages
// asked for (fewer faults and TLB misses; advisory). `what` is for the error.
StatusOr<std::byte*> MapAnonymous(size_t size, const std::string& what) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, "allocating " + std::to_string(size) + " bytes " + what);
  }
  ::madvise(p, size, MADV_HUGEPAGE);
  return static_cast<std::byte*>(p);
}

}  // namespace

StagingBuffer::~StagingBuffer() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

Status StagingBuffer::Reserve(size_t size) {
  if (size <= capacity_) return Status::Ok();
  if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  if (size == 0) return Status::Ok();
  STRATA_ASSIGN_OR_RETURN(data_, MapAnonymous(size, "of staging memory"));
  for (size_t off = 0; off < size; off += 4096) data_[off] = std::byte{0};  // fault in now
  capacity_ = size;
  return Status::Ok();
}

void RestoredMemoryDeleter::operator()(std::byte* p) const noexcept {
  if (p != nullptr && owned) ::munmap(p, size);
}

StatusOr<std::unique_ptr<std::byte[], RestoredMemoryDeleter>> AllocateRestoreMemory(
    size_t size, const std::string& what) {
  size = std::max<size_t>(size, 1);
  STRATA_ASSIGN_OR_RETURN(std::byte * p, MapAnonymous(size, "to restore " + what));
  return std::unique_ptr<std::byte[], RestoredMemoryDeleter>(p, RestoredMemoryDeleter{size, true});
}

}  // namespace strata
