// Copyright 2026 The Strata Authors.
//
// The memory of a restored step (RestoredMemoryDeleter): returned to the
// system once the step is dropped -- a large one by the engine's own
// thread, so the thread that drops it does not wait for its page tables to
// be torn down; a small one, or any in a child of fork() (which has no
// such thread), at once.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/staging.h"

namespace strata {
namespace {

// Whether [p, p + n) is mapped: msync fails with ENOMEM on an unmapped page.
bool Mapped(void* p, size_t n) { return ::msync(p, n, MS_ASYNC) == 0 || errno != ENOMEM; }

// Allocates `n` bytes as a restore does, touches them, drops them; returns
// the address they were at.
void* AllocateAndDrop(size_t n) {
  auto memory = AllocateRestoreMemory(n, "for the test");
  EXPECT_TRUE(memory.ok()) << memory.status().ToString();
  if (!memory.ok()) return nullptr;
  void* p = memory->get();
  std::memset(p, 1, n);
  EXPECT_TRUE(Mapped(p, n));
  memory->reset();
  return p;
}

TEST(RestoredMemoryTest, ALargeStepIsUnmappedAfterItIsDropped) {
  constexpr size_t kSize = 64 << 20;
  void* p = AllocateAndDrop(kSize);
  ASSERT_NE(p, nullptr);
  // Returned by the engine's thread: wait for it (a bound far beyond a
  // munmap's milliseconds, for a loaded machine; not a timing assertion).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Mapped(p, kSize) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(Mapped(p, kSize)) << "still mapped 30 s after it was dropped";
}

TEST(RestoredMemoryTest, ASmallStepIsUnmappedAtOnce) {
  constexpr size_t kSize = 1 << 20;
  void* p = AllocateAndDrop(kSize);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(Mapped(p, kSize));
}

TEST(RestoredMemoryTest, AChildOfForkUnmapsAtOnce) {
  AllocateAndDrop(64 << 20);  // the parent's thread runs now
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto memory = AllocateRestoreMemory(64 << 20, "in the child");
    if (!memory.ok()) ::_exit(2);
    void* p = memory->get();
    memory->reset();
    ::_exit(Mapped(p, 64 << 20) ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child's step stayed mapped; 2: no memory";
}

}  // namespace
}  // namespace strata
