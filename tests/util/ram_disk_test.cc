// Copyright 2026 The Strata Authors.
//
// util/ram_disk.h: what backs a checkpoint directory (a tmpfs, and its
// huge= option).
#include "util/ram_disk.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace strata
