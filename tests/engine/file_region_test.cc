// Copyright 2026 The Strata Authors.
//
// engine/file_region.h: where a step's data files are mapped. Each file
// starts at a 2 MiB boundary (a tmpfs maps huge pages only there), the gaps
// are no memory and no access, and populating a file the file system has
// no room for is an error, not a SIGBUS.
#include "engine/file_region.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

using testing::ScratchDir;

// The permissions of the mapping holding `p`, from /proc/self/maps ("" if
// none does).
std::string PermissionsAt(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::string perms;
    in >> std::hex >> lo >> dash >> hi >> perms;
    if (lo <= a && a < hi) return perms;
  }
  return "";
}

TEST(FileRegionTest, EachFileStartsAtATwoMiBBoundaryAndTheGapsAreNoMemory) {
  const std::vector<FileInfo> files = {
      {"data-00000.bin", (5 << 20) + 17}, {"data-00001.bin", 0}, {"data-00002.bin", 4096}};
  auto held = ReserveFileRegion(files, "three files");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const auto base = reinterpret_cast<uintptr_t>(held->region.data());
  EXPECT_EQ(base % kFileAlignment, 0u);
  EXPECT_EQ(held->file_offset, (std::vector<size_t>{0, 6 << 20, 6 << 20}));
  EXPECT_EQ(held->region.size(), size_t{8} << 20);
  const auto spans = FileSpans(*held, files);
  ASSERT_EQ(spans.size(), 2u);  // the empty file has none
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(spans[0].data(), held->region.data());
  EXPECT_EQ(spans[0].size(), ((5 << 20) + 17 + page - 1) / page * page);
  EXPECT_EQ(spans[1].data(), held->region.data() + (6 << 20));
  EXPECT_EQ(spans[1].size(), 4096u);
  // Reserved, not accessible: nothing is mapped over it yet.
  EXPECT_EQ(PermissionsAt(held->region.data()), "---p");
  EXPECT_EQ(PermissionsAt(held->region.data() + held->region.size() - 1), "---p");
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
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  ScratchDir d("region-full");
  if (::mount("tmpfs", d.path().c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs on " << d.path() << ": " << std::strerror(errno);
  }
  const std::vector<FileInfo> files = {{"data-00000.bin", 4 << 20}};
  const std::string path = d.Sub("data-00000.bin");
  auto file = Env::Default()->OpenWritable(path);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Truncate(4 << 20).ok());  // sparse: the tmpfs has 1 MiB
  auto held = ReserveFileRegion(files, "one file");
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE((*file)->MapShared(4 << 20, held->region.data()).ok());
  ThreadPool pool(1);
  Status s = PopulateForWriting(&pool, FileSpans(*held, files), "the step files in here");
  ::munmap(held->region.data(), held->region.size());
  ASSERT_TRUE((*file)->Close().ok());
  ::umount2(d.path().c_str(), MNT_DETACH);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("the step files in here"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace strata
