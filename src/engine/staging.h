// Copyright 2026 The Strata Authors.
//
// Staging memory for async saves: one anonymous mapping, faulted in when it
// is (re)allocated and reused by every later save of the same or smaller
// size, so snapshotting takes no page fault after the first save.
// Not thread-safe.
#ifndef STRATA_ENGINE_STAGING_H_
#define STRATA_ENGINE_STAGING_H_

#include <cstddef>
#include <memory>
#include <string>

#include "strata/checkpointer.h"
#include "strata/status.h"

namespace strata {

class StagingBuffer {
 public:
  StagingBuffer() = default;
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  // Ensures capacity() >= size; keeps the mapping when it is large enough.
  Status Reserve(size_t size);
  std::byte* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

// Memory for a restored step of `size` bytes (at least one page is mapped),
// not yet faulted in: the parallel reads fault it in from several threads.
// `what` names the step in the error.
StatusOr<std::unique_ptr<std::byte[], RestoredMemoryDeleter>> AllocateRestoreMemory(
    size_t size, const std::string& what);

}  // namespace strata

#endif  // STRATA_ENGINE_STAGING_H_
