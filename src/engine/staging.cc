// Copyright 2026 The Strata Authors.
#include "engine/staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace strata {

StagingBuffer::~StagingBuffer() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

Status StagingBuffer::Reserve(size_t size) {
  if (size <= capacity_) return Status::Ok();
  if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  if (size == 0) return Status::Ok();
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, "allocating " + std::to_string(size) + " bytes of staging memory");
  }
  ::madvise(p, size, MADV_HUGEPAGE);  // fewer faults and TLB misses; advisory
  data_ = static_cast<std::byte*>(p);
  for (size_t off = 0; off < size; off += 4096) data_[off] = std::byte{0};  // fault in now
  capacity_ = size;
  return Status::Ok();
}

void RestoredMemoryDeleter::operator()(std::byte* p) const noexcept {
  if (p != nullptr) ::munmap(p, size);
}

StatusOr<std::unique_ptr<std::byte[], RestoredMemoryDeleter>> AllocateRestoreMemory(
    size_t size, const std::string& what) {
  size = std::max<size_t>(size, 1);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(errno, "allocating " + std::to_string(size) + " bytes to restore " + what);
  }
  ::madvise(p, size, MADV_HUGEPAGE);  // 512x fewer faults; advisory
  return std::unique_ptr<std::byte[], RestoredMemoryDeleter>(static_cast<std::byte*>(p),
                                                             RestoredMemoryDeleter{size});
}

}  // namespace strata
