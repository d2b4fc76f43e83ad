// Copyright 2026 The Strata Authors.
//
// engine/file_region.h: where a step's data files are mapped. Each file
// starts at a huge page's boundary (a tmpfs maps huge pages only there),
// the gaps are no memory and no access, and a file the file system has no
// room for is an error, not a SIGBUS.
#include "engine/file_region.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

using testing::MappingAt;
using testing::ScratchDir;
using testing::TestMount;

TEST(FileRegionTest, EachFileStartsAtAHugePageBoundaryAndTheGapsAreNoMemory) {
  const std::vector<FileInfo> files = {
      {"data-00000.bin", (5 << 20) + 17}, {"data-00001.bin", 0}, {"data-00002.bin", 4096}};
  auto held = ReserveFileRegion(files, "three files");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const auto base = reinterpret_cast<uintptr_t>(held->region.data());
  const size_t a = FileAlignment();  // 2 MiB on x86-64
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t first = ((5 << 20) + 17 + a - 1) / a * a;
  EXPECT_EQ(base % a, 0u);
  EXPECT_EQ(held->file_offset, (std::vector<size_t>{0, first, first}));
  EXPECT_EQ(held->region.size(), first + a);
  const auto spans = FileSpans(*held, files);
  ASSERT_EQ(spans.size(), 2u);  // the empty file has none
  EXPECT_EQ(spans[0].data(), held->region.data());
  EXPECT_EQ(spans[0].size(), ((5 << 20) + 17 + page - 1) / page * page);
  EXPECT_EQ(spans[1].data(), held->region.data() + first);
  EXPECT_EQ(spans[1].size(), page);
  // Reserved, not accessible: nothing is mapped over it yet.
  EXPECT_EQ(MappingAt(held->region.data()).perms, "---p");
  EXPECT_EQ(MappingAt(held->region.data() + held->region.size() - 1).perms, "---p");
  ASSERT_EQ(::munmap(held->region.data(), held->region.size()), 0);

  auto empty = ReserveFileRegion({{"data-00000.bin", 0}}, "an empty file");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->region.empty());
  EXPECT_TRUE(FileSpans(*empty, {{"data-00000.bin", 0}}).empty());
}

// A file mapped over the region, populated for writing on a tmpfs with no
// room for it: RESOURCE_EXHAUSTED naming what it was for, where a store
// into its pages would have raised SIGBUS.
TEST(FileRegionTest, PopulatingAFileAFullTmpfsCannotHoldIsAnError) {
  // Without MADV_POPULATE_WRITE (before Linux 5.14) the stores that stand
  // in for it would raise the SIGBUS; step files get their room first
  // there (WritableFile::Allocate), so it is never reached.
  if (!PopulatesForWriting()) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE";
  ScratchDir d("region-full");
  const TestMount ram(d.path(), "size=1m");
  if (!ram.why().empty()) GTEST_SKIP() << ram.why();
  const std::vector<FileInfo> files = {{"data-00000.bin", 4 << 20}};
  auto file = Env::Default()->OpenWritable(d.Sub("data-00000.bin"));
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Truncate(4 << 20).ok());  // sparse: the tmpfs has 1 MiB
  auto held = ReserveFileRegion(files, "one file");
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE((*file)->MapShared(4 << 20, held->region.data()).ok());
  ThreadPool pool(1);
  Status s = PopulateForWriting(&pool, FileSpans(*held, files), "the step files in here");
  ::munmap(held->region.data(), held->region.size());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("the step files in here"), std::string::npos) << s.ToString();
}

// Room asked for first (as StepSlot does on a kernel without
// MADV_POPULATE_WRITE): a full tmpfs answers at once, and keeps nothing of
// what it could not give.
TEST(FileRegionTest, AllocatingMoreThanATmpfsHoldsFailsAndKeepsNothing) {
  ScratchDir d("region-room");
  const TestMount ram(d.path(), "size=1m");
  if (!ram.why().empty()) GTEST_SKIP() << ram.why();
  auto file = Env::Default()->OpenWritable(d.Sub("data-00000.bin"));
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Truncate(4 << 20).ok());
  Status s = (*file)->Allocate(4 << 20);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find(d.Sub("data-00000.bin")), std::string::npos) << s.ToString();
  struct stat st {};
  ASSERT_EQ(::stat(d.Sub("data-00000.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_blocks, 0) << "the tmpfs kept part of a failed allocation";
  ASSERT_TRUE((*file)->Allocate(512 << 10).ok());  // what fits, fits
  ASSERT_TRUE((*file)->Close().ok());
}

}  // namespace
}  // namespace strata
