// Copyright 2026 The Strata Authors.
//
// util/ram_disk.h: what backs a checkpoint directory (a tmpfs, and its
// huge= option).
#include "util/ram_disk.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "test_util.h"

namespace strata {
namespace {

constexpr char kMountinfo[] =
    "22 1 0:21 / / rw,relatime - ext4 /dev/vda rw\n"
    "25 22 0:23 / /dev/shm rw,relatime shared:5 - tmpfs tmpfs rw,size=1024k\n"
    "26 22 0:24 / /local rw - tmpfs tmpfs rw,size=64g,huge=within_size,mode=750\n"
    "27 22 0:25 / /mnt/ram\\040disk rw master:1 shared:2 - tmpfs  rw,huge=always\n"
    "28 26 0:26 / /local/disk rw - ext4 /dev/vdb rw\n"
    "29 22 0:24 /node0 /srv/node0 rw - tmpfs tmpfs rw,size=64g,huge=within_size,mode=750\n"
    "30 22 0:27 / /run/a rw - tmpfs tmpfs rw,huge=advise\n";

TEST(RamDiskTest, HugeOptionOfTheTmpfsWithTheDevice) {
  EXPECT_EQ(TmpfsHugeOption(kMountinfo, "0:24"), "within_size");  // also bind-mounted
  EXPECT_EQ(TmpfsHugeOption(kMountinfo, "0:23"), "never");
  EXPECT_EQ(TmpfsHugeOption(kMountinfo, "0:25"), "always");  // empty source field
  EXPECT_EQ(TmpfsHugeOption(kMountinfo, "0:27"), "advise");
  EXPECT_EQ(TmpfsHugeOption(kMountinfo, "0:21"), "");  // not a tmpfs
  EXPECT_EQ(TmpfsHugeOption(kMountinfo, "0:99"), "");
  EXPECT_EQ(TmpfsHugeOption("garbage\n\n1 2 0:5 - -\n", "0:5"), "");
  EXPECT_FALSE((RamDisk{.tmpfs = true, .huge = "advise"}.HugePages()));  // only for madvise
  EXPECT_TRUE((RamDisk{.tmpfs = true, .huge = "within_size"}.HugePages()));
}

TEST(RamDiskTest, DescribesTheTestsTmpfs) {
  testing::ScratchDir dir("ramdisk");
  RamDisk d = DescribeRamDisk(dir.path());
  EXPECT_TRUE(d.tmpfs) << dir.path();
  EXPECT_FALSE(d.huge.empty());
  EXPECT_FALSE(DescribeRamDisk("/proc/self").tmpfs);
}

TEST(RamDiskTest, RoomIsCheckedAgainstWhatTheFileSystemHasFree) {
  testing::ScratchDir dir("ramdisk");
  EXPECT_TRUE(CheckFreeSpace(dir.path(), 4096, "a page").ok());
  Status s = CheckFreeSpace(dir.path(), uint64_t{1} << 60, "an exbibyte");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("no room for an exbibyte in " + dir.path()), std::string::npos)
      << s.ToString();
  s = CheckFreeSpace(dir.path(), 4096, "a page", uint64_t{1} << 60);  // the margin counts
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("kept free"), std::string::npos) << s.ToString();
  EXPECT_EQ(CheckFreeSpace(dir.path() + "/missing", 1, "a byte").code(), StatusCode::kNotFound);
  // Sizes near the top of uint64_t do not wrap around into "fits".
  EXPECT_FALSE(CheckFreeSpace(dir.path(), 4096, "a page", ~uint64_t{0} - 100).ok());
}

// A file system that reports no size (a tmpfs mounted size=0, ramfs) is
// limited by memory alone: nothing is refused by its figures.
TEST(RamDiskTest, AFileSystemWithoutASizeRefusesNothing) {
  testing::ScratchDir dir("ramdisk");
  const testing::TestMount ram(dir.path(), "size=0");
  if (!ram.why().empty()) GTEST_SKIP() << ram.why();
  EXPECT_TRUE(CheckFreeSpace(dir.path(), uint64_t{1} << 40, "a tebibyte").ok());
}

TEST(RamDiskTest, BytesHeldAreTheFilesPages) {
  testing::ScratchDir dir("ramdisk");
  const std::string path = dir.path() + "/f";
  std::ofstream(path) << std::string(5000, 'x');
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t held = BytesHeld(path);  // whole pages (huge ones, with shmem_enabled=force)
  EXPECT_GE(held, (5000 + page - 1) / page * page);
  EXPECT_EQ(held % page, 0u);
  EXPECT_EQ(BytesHeld(dir.path() + "/missing"), 0u);
}

}  // namespace
}  // namespace strata
