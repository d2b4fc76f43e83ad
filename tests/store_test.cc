// Copyright 2026 The Strata Authors.
//
// The agent's store: removed steps leave spare files that the next transfer
// receives into, within a limit of about one step.
#include "agent/store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "agent/ram_disk.h"
#include "agent/rpc.h"
#include "net/socket.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A client step directory with two files of the given sizes.
std::string MakeClientStep(const std::string& local, const std::string& name, size_t a, size_t b,
                           char fill) {
  std::string dir = JoinPath(local, name);
  fs::create_directories(dir);
  testing::WriteFile(JoinPath(dir, "a.bin"), std::string(a, fill));
  testing::WriteFile(JoinPath(dir, "b.bin"), std::string(b, static_cast<char>(fill + 1)));
  return dir;
}

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_.path(), &pool_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  std::string SpareDir() const { return JoinPath(store_->root(), "spare"); }

  testing::ScratchDir dir_{"store"};
  ThreadPool pool_{1};
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, ARemovedStepLeavesSpareFilesUpToOneStep) {
  const StepKey one{"j", 0, 1}, two{"j", 0, 2};
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "c1", 3000, 1000, 'a'), one).ok());
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "c2", 3000, 1000, 'c'), two).ok());
  ASSERT_TRUE(store_->Remove(one).ok());
  EXPECT_EQ(store_->SpareBytes(), 4000u);
  EXPECT_EQ(FilesIn(SpareDir()), 2u);
  EXPECT_FALSE(fs::exists(store_->StepPath(one)));
  ASSERT_TRUE(store_->Remove(two).ok());  // over the limit (one step): deleted
  EXPECT_EQ(store_->SpareBytes(), 4000u);
  EXPECT_EQ(FilesIn(SpareDir()), 2u);

  std::string to = JoinPath(dir_.path(), "taken");
  ASSERT_TRUE(store_->TakeSpare(2500, to));  // the smallest that holds it: 3000
  EXPECT_EQ(fs::file_size(to), 3000u);
  EXPECT_EQ(store_->SpareBytes(), 1000u);
  EXPECT_FALSE(store_->TakeSpare(10, to));  // never replaces an existing file
  store_->DropSpare();
  EXPECT_EQ(store_->SpareBytes(), 0u);
  EXPECT_EQ(FilesIn(SpareDir()), 0u);
  EXPECT_FALSE(store_->TakeSpare(10, JoinPath(dir_.path(), "none")));
}

TEST_F(StoreTest, ReopeningEmptiesTheSpareFiles) {
  const StepKey one{"j", 0, 1};
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "c1", 100, 100, 'a'), one).ok());
  ASSERT_TRUE(store_->Remove(one).ok());
  const std::string spare = SpareDir();
  ASSERT_EQ(FilesIn(spare), 2u);
  store_.reset();
  auto s = Store::Open(dir_.path(), &pool_);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(FilesIn(spare), 0u);
  EXPECT_EQ((*s)->SpareBytes(), 0u);
}

// A transfer into spare files that are longer, shorter or absent ends with
// exactly the sent bytes, and the step verifies.
TEST_F(StoreTest, ATransferReceivesIntoSpareFilesAndVerifies) {
  const StepKey old_step{"j", 1, 1}, sent{"j", 1, 2};
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "old", 5000, 10, 'x'), old_step).ok());
  ASSERT_TRUE(store_->Remove(old_step).ok());  // spare: 5000 and 10 bytes
  ASSERT_EQ(store_->SpareBytes(), 5010u);

  testing::ScratchDir src("store-src");
  std::string step_dir = MakeClientStep(src.path(), "s", 4000, 700, 'p');
  auto index = BuildStepIndex(step_dir, &pool_);
  ASSERT_TRUE(index.ok()) << index.status().ToString();

  auto listener = net::Socket::Listen("127.0.0.1", 0, 4);
  ASSERT_TRUE(listener.ok());
  auto port = listener->LocalPort();
  ASSERT_TRUE(port.ok());
  Status sent_status;
  std::thread sender([&] {
    auto c = net::Socket::Connect("127.0.0.1", *port, 5s);
    sent_status = c.ok() ? SendStepFiles(*c, step_dir, *index) : c.status();
  });
  auto server = listener->Accept(5s);
  ASSERT_TRUE(server.ok());
  auto incoming = store_->NewIncomingDir();
  ASSERT_TRUE(incoming.ok());
  Status received = RecvStepFiles(*server, *incoming, *index, store_.get());
  sender.join();
  ASSERT_TRUE(sent_status.ok()) << sent_status.ToString();
  ASSERT_TRUE(received.ok()) << received.ToString();
  EXPECT_EQ(store_->SpareBytes(), 0u);                            // both spare files were used
  EXPECT_EQ(fs::file_size(JoinPath(*incoming, "a.bin")), 4000u);  // 5000 truncated
  EXPECT_EQ(fs::file_size(JoinPath(*incoming, "b.bin")), 700u);   // 10 extended
  ASSERT_TRUE(store_->Adopt(*incoming, sent, *index).ok());
  EXPECT_TRUE(store_->Verify(sent).ok());
  EXPECT_EQ(testing::ReadFile(JoinPath(store_->StepPath(sent), "a.bin")), std::string(4000, 'p'));
}

// --- RamDisk ---

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
}  // namespace strata::agent
