// Copyright 2026 The Strata Authors.
#include "engine/staging.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "util/mutex.h"

namespace strata {
namespace {

// Unmapping costs in proportion to the pages mapped: their page tables are
// torn down (8.7 ms for a 256 MiB restored step on the development VM, a
// quarter of a restore after a restart). A large restored step is unmapped
// by a thread of the process's own, so the thread that drops it -- the
// training thread, as a restore returns -- does not wait. Nothing uses the
// memory any more; only its address space and anonymous pages come back a
// little later, in the order dropped.
class Unmapper {
 public:
  static constexpr size_t kInBackground = 16 << 20;  // smaller ones at once

  // Never destroyed: its thread lives as long as the process.
  static Unmapper& Get() {
    static Unmapper* const u = new Unmapper();
    return *u;
  }

  void Unmap(void* p, size_t n) {
    // A child of fork() has no such thread (and must not take a lock the
    // parent's thread may have held): it unmaps at once.
    if (n < kInBackground || !Started()) {
      ::munmap(p, n);
      return;
    }
    MutexLock l(&mu_);
    queue_.emplace_back(p, n);
    wake_.Signal();
  }

 private:
  // Whether this process's thread runs, starting it on first use.
  bool Started() {
    const pid_t self = ::getpid();
    const pid_t started = pid_.load();
    if (started == self) return true;
    if (started != 0) return false;  // a child of fork(): the thread is the parent's
    MutexLock l(&mu_);
    if (pid_.load() == self) return true;
    try {
      std::thread([this] { Run(); }).detach();
    } catch (const std::system_error&) {
      return false;
    }
    pid_.store(self);
    return true;
  }

  void Run() {
    for (;;) {
      std::pair<void*, size_t> next;
      {
        MutexLock l(&mu_);
        while (queue_.empty()) wake_.Wait(&mu_);
        next = queue_.front();
        queue_.pop_front();
      }
      ::munmap(next.first, next.second);
    }
  }

  std::atomic<pid_t> pid_{0};  // the process whose thread runs (0: none yet)
  Mutex mu_;
  CondVar wake_;
  std::deque<std::pair<void*, size_t>> queue_ GUARDED_BY(mu_);
};

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
  if (p != nullptr && owned) Unmapper::Get().Unmap(p, size);
}

StatusOr<std::unique_ptr<std::byte[], RestoredMemoryDeleter>> AllocateRestoreMemory(
    size_t size, const std::string& what) {
  size = std::max<size_t>(size, 1);
  STRATA_ASSIGN_OR_RETURN(std::byte * p, MapAnonymous(size, "to restore " + what));
  return std::unique_ptr<std::byte[], RestoredMemoryDeleter>(p, RestoredMemoryDeleter{size, true});
}

}  // namespace strata
