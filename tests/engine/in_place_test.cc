// Copyright 2026 The Strata Authors.
//
// Saves copied straight into the step's files (engine/step_slot.h,
// engine/slot_pool.h) through CudaStager with host buffers, as strata.torch
// saves on any machine: the bytes committed are the ones saved, the files
// are set up once and recycled, a reservation makes the first save set
// nothing up, the host memory held stays within (k + 1) state sizes, and a
// step another process removed is never written through an old mapping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "engine/slot_saver.h"
#include "fault_env.h"
#include "format/naming.h"
#include "strata/catalog.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/ram_disk.h"

namespace strata {
namespace {

using testing::FaultInjectionEnv;
using testing::FlipByte;
using testing::MappingAt;
using testing::Op;
using testing::RandomData;
using testing::ScratchDir;
using testing::TestMount;

constexpr size_t kBigItem = (3 << 20) + 123;
constexpr uint64_t kTestPage = 4096;
uint64_t TestPageRound(uint64_t n) { return (n + kTestPage - 1) / kTestPage * kTestPage; }
constexpr size_t kSmallItem = 4000;

// The kB of huge pages (ShmemPmdMapped in /proc/self/smaps) mapped from
// files under `dir`.
uint64_t HugeKbMappedFrom(const std::string& dir) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool ours = false;
  uint64_t kb = 0;
  while (std::getline(smaps, line)) {
    const size_t colon = line.find(':');
    if (colon != std::string::npos && line.find(' ') > colon) {  // "Field:   N kB"
      if (ours && line.compare(0, colon, "ShmemPmdMapped") == 0) {
        kb += std::stoull(line.substr(colon + 1));
      }
      continue;
    }
    const size_t slash = line.find('/');  // a mapping's header; its file last
    ours = slash != std::string::npos && line.compare(slash, dir.size() + 1, dir + "/") == 0;
  }
  return kb;
}

// The kB of /proc/meminfo's `field`.
uint64_t MeminfoKb(const std::string& field) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) {
      return std::stoull(line.substr(field.size() + 1));
    }
  }
  return 0;
}

// Whether the tmpfs at `dir` gives a new file a huge page now (the kernel
// falls back to small pages when no free 2 MiB block is left).
bool GivesHugePages(const std::string& dir) {
  const std::string probe = dir + "/huge-page-probe";
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return false;
  const uint64_t before = MeminfoKb("ShmemHugePages");
  const bool given = ::ftruncate(fd, 4 << 20) == 0 && ::fallocate(fd, 0, 0, 4 << 20) == 0 &&
                     MeminfoKb("ShmemHugePages") >= before + 2048;
  ::close(fd);
  ::unlink(probe.c_str());
  return given;
}

// A restore plan's destinations: item "big" into `big` (kBigItem bytes of
// host memory).
std::vector<MutableDeviceItem> BigInto(std::vector<uint8_t>& big) {
  return {
      {"big", DType::kUInt8, {static_cast<int64_t>(kBigItem)}, big.data(), kBigItem, -1, nullptr}};
}

// A state of three host buffers whose bytes depend on a version.
struct HostState {
  std::vector<uint8_t> big, small;
  std::vector<int64_t> step = {0};
  explicit HostState(int v) : big(RandomData(kBigItem, v)), small(RandomData(kSmallItem, 100 + v)) {
    step[0] = v;
  }
  std::vector<DeviceItem> Items() const {
    return {{"big", DType::kUInt8, {static_cast<int64_t>(kBigItem)}, big.data(), kBigItem},
            {"small", DType::kUInt8, {static_cast<int64_t>(kSmallItem)}, small.data(), kSmallItem},
            {"step", DType::kInt64, {}, step.data(), 8}};
  }
  uint64_t bytes() const { return kBigItem + kSmallItem + 8; }
};

class InPlaceTest : public ::testing::Test {
 protected:
  void Open(int max_to_keep, Env* env = nullptr) {
    stager_.reset();
    ckpt_.reset();
    CheckpointerOptions o;
    o.preemption_signals = {};
    o.max_to_keep = max_to_keep;
    o.chunk_size = 64 << 10;
    o.io_threads = 2;
    o.env = env;
    auto ckpt = Checkpointer::Open(dir_.path(), o);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    ckpt_ = std::move(*ckpt);
    CudaStagerOptions so;
    so.allow_host_only = true;
    so.runtime_library = dir_.Sub("no-cuda-here.so");  // host buffers only, everywhere
    auto stager = CudaStager::Open(ckpt_.get(), so);
    ASSERT_TRUE(stager.ok()) << stager.status().ToString();
    stager_ = std::move(*stager);
  }
  void TearDown() override {
    stager_.reset();
    ckpt_.reset();
  }
  // Steps 1 and 2 saved, then the checkpointer opened anew, as by a new
  // process: step 1's files are not mapped by it, so a save that recycles
  // them reshapes them.
  void SaveTwoStepsAndReopen(Env* env = nullptr) {
    Open(2, env);
    Save(1, HostState(1));
    Save(2, HostState(2));
    Open(2, env);
  }
  // Saves `bytes` as the one item ("big") of `step`.
  StatusOr<SaveResult> SaveBytes(int64_t step, const std::vector<uint8_t>& bytes) {
    const std::vector<DeviceItem> items = {
        {"big", DType::kUInt8, {static_cast<int64_t>(bytes.size())}, bytes.data(), bytes.size()}};
    return stager_->Save(step, items);
  }
  void Save(int64_t step, const HostState& s) {
    auto items = s.Items();
    auto r = stager_->Save(step, items, DeviceSaveMode::kBlocking);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ckpt_->Wait().ok());
  }
  void ExpectStep(int64_t step, const HostState& s) {
    auto r = RestoreStep(dir_.path(), step);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto bytes = [&](const char* name) {
      auto d = r->Find(name)->data;
      return std::vector<uint8_t>(reinterpret_cast<uint8_t*>(d.data()),
                                  reinterpret_cast<uint8_t*>(d.data()) + d.size());
    };
    EXPECT_EQ(bytes("big"), s.big) << "step " << step;
    EXPECT_EQ(bytes("small"), s.small) << "step " << step;
    EXPECT_EQ(*reinterpret_cast<int64_t*>(r->Find("step")->data.data()), s.step[0]);
  }
  // The inodes of a directory's data files, by name.
  std::map<std::string, ino_t> Inodes(const std::string& dir) {
    std::map<std::string, ino_t> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (!ParseDataFileName(e.path().filename().string())) continue;
      struct stat st;
      EXPECT_EQ(::stat(e.path().c_str(), &st), 0);
      out[e.path().filename().string()] = st.st_ino;
    }
    return out;
  }
  std::vector<std::string> TempDirs() {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
      if (IsTempName(e.path().filename().string())) out.push_back(e.path().string());
    }
    return out;
  }
  void AwaitReservation() {
    for (int i = 0; i < 2000 && stager_->status().reserving; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_FALSE(stager_->status().reserving);
  }

  ScratchDir dir_{"in-place"};
  std::unique_ptr<Checkpointer> ckpt_;
  std::unique_ptr<CudaStager> stager_;
};

TEST_F(InPlaceTest, SavesLandInTheStepFilesAndRecycleThem) {
  Open(2);
  EXPECT_TRUE(stager_->status().in_place);
  EXPECT_EQ(stager_->status().devices, 0);
  for (int v = 1; v <= 2; ++v) Save(v, HostState(v));
  const auto first = Inodes(dir_.path() + "/1");
  const uint64_t held = stager_->status().staging_bytes;
  EXPECT_GE(held, 2 * HostState(1).bytes());
  for (int v = 3; v <= 6; ++v) {
    Save(v, HostState(v));
    ExpectStep(v, HostState(v));
    EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{v - 1, v}));
    EXPECT_EQ(stager_->status().staging_bytes, held) << "step " << v;
  }
  EXPECT_EQ(Inodes(dir_.path() + "/5"), first);  // step 1's files, recycled twice
  ExpectStep(5, HostState(5));
  EXPECT_TRUE(TempDirs().empty());
}

TEST_F(InPlaceTest, AReservationIsTheFirstSavesFiles) {
  Open(2);
  const HostState s(1);
  EXPECT_EQ(stager_->status().staging_bytes, 0u);
  ASSERT_TRUE(stager_->Reserve(s.Items()).ok());
  AwaitReservation();
  EXPECT_GE(stager_->status().staging_bytes, s.bytes());
  auto temps = TempDirs();
  ASSERT_EQ(temps.size(), 1u);
  const auto reserved = Inodes(temps[0]);
  Save(1, s);
  EXPECT_EQ(Inodes(dir_.path() + "/1"), reserved);  // the save made no files of its own
  ExpectStep(1, s);
  // The second save could not recycle a step yet: a spare was prepared
  // after the first commit, in the background.
  AwaitReservation();
  temps = TempDirs();
  ASSERT_EQ(temps.size(), 1u);
  const auto spare = Inodes(temps[0]);
  Save(2, HostState(2));
  EXPECT_EQ(Inodes(dir_.path() + "/2"), spare);
}

// A checkpointer closed while its saver thread still prepares the files a
// restore reserved for the next save: closing stops that thread before it
// takes away what the thread reads (TSan checks: the thread reports the
// staged bytes as the reservation ends), and the files left half-prepared
// are removed when the directory is opened again.
TEST_F(InPlaceTest, ACheckpointerClosedWhileItReservesStopsItsSaverFirst) {
  std::vector<uint8_t> big = RandomData(64 << 20, 7);
  Open(2);
  ASSERT_TRUE(SaveBytes(1, big).ok());
  Open(2);  // a restart: the restore reserves the next save's files
  std::vector<uint8_t> into(big.size());
  const std::vector<MutableDeviceItem> items = {
      {"big", DType::kUInt8, {static_cast<int64_t>(into.size())}, into.data(), into.size()}};
  auto restored = stager_->RestoreInto(items, RestoreOptions());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  stager_.reset();
  ckpt_.reset();
  EXPECT_EQ(into, big);
  Open(2);
  EXPECT_TRUE(TempDirs().empty());
}

TEST_F(InPlaceTest, HostMemoryStaysWithinOneStateMoreThanTheStepsKept) {
  for (int keep : {1, 2, 3}) {
    Open(keep);
    const uint64_t state = TestPageRound(HostState(1).bytes());
    for (int v = 1; v <= 6; ++v) {
      Save(v, HostState(v));
      AwaitReservation();
      EXPECT_LE(stager_->status().staging_bytes, (keep + 1) * (state + (64 << 10)))
          << "max_to_keep " << keep << " step " << v;
    }
    ExpectStep(6, HostState(6));
    stager_.reset();
    ckpt_.reset();
    std::filesystem::remove_all(dir_.path());
    std::filesystem::create_directories(dir_.path());
  }
}

TEST_F(InPlaceTest, ADirectoryTheAgentOwnsKeepsOnlyTheSpareMapped) {
  Open(0);  // max_to_keep 0: the directory is another's
  const uint64_t one = HostState(1).bytes();
  for (int v = 1; v <= 3; ++v) {
    Save(v, HostState(v));
    AwaitReservation();
    EXPECT_LE(stager_->status().staging_bytes, one + (1 << 20));
  }
  EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{1, 2, 3}));
  for (int v = 1; v <= 3; ++v) ExpectStep(v, HostState(v));
}

TEST_F(InPlaceTest, TheLayoutFollowsAnItemThatChanges) {
  Open(2);
  Save(1, HostState(1));
  Save(2, HostState(2));
  HostState bigger(3);
  bigger.small = RandomData(2 * kSmallItem, 77);
  auto items = bigger.Items();
  items[1].shape = {static_cast<int64_t>(2 * kSmallItem)};
  items[1].size = 2 * kSmallItem;
  ASSERT_TRUE(stager_->Save(3, items).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  auto r = RestoreStep(dir_.path(), 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->Find("small")->data.size(), 2 * kSmallItem);
  EXPECT_EQ(std::memcmp(r->Find("small")->data.data(), bigger.small.data(), 2 * kSmallItem), 0);
  Save(4, HostState(4));  // the layout of the first saves again
  ExpectStep(4, HostState(4));
  EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(RestoreStep(dir_.path(), 3)->Find("small")->data.size(), 2 * kSmallItem);
}

TEST_F(InPlaceTest, AStepRemovedByAnotherProcessIsNeverWrittenThroughItsOldMapping) {
  Open(2);
  Save(1, HostState(1));
  Save(2, HostState(2));
  const auto gone = Inodes(dir_.path() + "/1");
  std::filesystem::rename(dir_.path() + "/1", dir_.path() + "/elsewhere");
  std::filesystem::create_directory(dir_.path() + "/1");  // an empty look-alike
  std::filesystem::copy(dir_.path() + "/2/" + std::string(kManifestFileName),
                        dir_.path() + "/1/" + std::string(kManifestFileName));
  Save(3, HostState(3));
  ExpectStep(3, HostState(3));
  ExpectStep(2, HostState(2));
  EXPECT_NE(Inodes(dir_.path() + "/3"), gone);
  // The files moved away still hold step 1, untouched.
  std::filesystem::remove_all(dir_.path() + "/1");
  std::filesystem::rename(dir_.path() + "/elsewhere", dir_.path() + "/1");
  ExpectStep(1, HostState(1));
}

TEST_F(InPlaceTest, AFailingGateCommitsNothingAndIsReported) {
  Open(2);
  Save(1, HostState(1));
  const HostState s(2);
  auto items = s.Items();
  auto r = stager_->Save(2, items, DeviceSaveMode::kBlocking,
                         [] { return FailedPreconditionError("a buffer changed under its copy"); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();  // async: the failure comes with the commit
  Status waited = ckpt_->Wait();
  EXPECT_EQ(waited.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(waited.message().find("changed under its copy"), std::string::npos)
      << waited.ToString();
  EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{1}));
  Save(3, HostState(3));  // the files of the failed save are reused
  ExpectStep(3, HostState(3));
  ExpectStep(1, HostState(1));
}

// A slot handed over while copies into it may still land (a stager's
// device copies) is given back to the pool, which may unmap it, only after
// item_ready said every item's copy landed: here a save refused because the
// previous one failed.
TEST_F(InPlaceTest, AnUncommittedSlotGoesBackOnlyOnceItsCopiesLanded) {
  Open(2);
  SlotSaver* saver = SlotSaverOf(ckpt_.get());
  ASSERT_NE(saver, nullptr);
  const HostState s(1);
  std::vector<Item> items;
  for (const DeviceItem& d : s.Items()) items.push_back({d.name, d.dtype, d.shape, d.data, d.size});
  const StepInfo layout = saver->Layout(items);
  auto slot = saver->AcquireSlot(1, layout);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  auto first = saver->SaveSlot(1, std::move(*slot), nullptr,
                               [] { return InternalError("the first save fails"); });
  ASSERT_TRUE(first.ok()) << first.status().ToString();  // async: fails on the saver's thread
  slot = saver->AcquireSlot(2, layout);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  std::vector<size_t> waited;
  auto second = saver->SaveSlot(
      2, std::move(*slot),
      [&](size_t i) {
        waited.push_back(i);
        return Status::Ok();
      },
      nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("the first save fails"), std::string::npos)
      << second.status().ToString();
  EXPECT_EQ(waited, (std::vector<size_t>{0, 1, 2}));
  EXPECT_TRUE(ListSteps(dir_.path()).value().empty());
}

TEST_F(InPlaceTest, AnOnDemandSaveIsCommittedWhenSaveReturns) {
  Open(2);
  Save(1, HostState(1));
  ckpt_->RequestOnDemand();
  const HostState s(2);
  auto items = s.Items();
  auto r = stager_->Save(2, items);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->on_demand);
  EXPECT_TRUE(r->committed);
  ExpectStep(2, s);
}

TEST_F(InPlaceTest, FilesThatCannotBeMappedFailTheSaveNamingTheDirectory) {
  FaultInjectionEnv env;
  Open(2, &env);
  env.FailAt(Op::kWrite, 1, ENOSPC, /*sticky=*/true);  // mapping the files writes them
  const HostState s(1);
  auto items = s.Items();
  auto r = stager_->Save(1, items);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir_.path()), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(TempDirs().empty());  // what it made is gone
  env.FailAt(Op::kWrite, 1000000, 0);
  Save(2, HostState(2));
  ExpectStep(2, HostState(2));
  stager_.reset();  // before the Env they use
  ckpt_.reset();
}

// On a tmpfs that backs files with huge pages (huge=within_size, as
// deploy/ mounts the RAM disk), a save's step files are made of huge pages
// and mapped with them, and so is a restarted job's mapping of the step
// (engine/file_region.h): without it each is 4 KiB pages, a fault each.
TEST_F(InPlaceTest, StepFilesOnAHugePageTmpfsAreMappedWithHugePages) {
  std::ifstream shmem("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string modes;
  if (!std::getline(shmem, modes) || modes.find("[deny]") != std::string::npos) {
    GTEST_SKIP() << "this kernel gives no tmpfs huge pages";
  }
  if (::prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1) GTEST_SKIP() << "huge pages are off for us";
  const TestMount ram(dir_.path(), "size=64m,huge=within_size");
  if (!ram.why().empty()) GTEST_SKIP() << ram.why();
  if (!GivesHugePages(dir_.path())) {
    GTEST_SKIP() << "the tmpfs gives no huge page now (no free 2 MiB block?)";
  }
  Open(2);
  const HostState s(1);  // its big item's file is one huge page and 1 MiB more
  Save(1, s);
  EXPECT_GE(HugeKbMappedFrom(dir_.path()), 2048u) << "the step files are mapped by 4 KiB pages";

  // A restart: the step's files mapped by a checkpointer of their own.
  stager_.reset();
  ckpt_.reset();
  ASSERT_EQ(HugeKbMappedFrom(dir_.path()), 0u);
  Open(2);
  std::vector<uint8_t> big(kBigItem), small(kSmallItem);
  std::vector<int64_t> step(1);
  const std::vector<MutableDeviceItem> into = {
      {"big", DType::kUInt8, {static_cast<int64_t>(kBigItem)}, big.data(), kBigItem, -1, nullptr},
      {"small",
       DType::kUInt8,
       {static_cast<int64_t>(kSmallItem)},
       small.data(),
       kSmallItem,
       -1,
       nullptr},
      {"step", DType::kInt64, {}, step.data(), 8, -1, nullptr}};
  RestoreOptions options;
  // Read once the big item verified: its pages are faulted in by then (a
  // chunk's just before it is checksummed), and still mapped.
  std::atomic<uint64_t> seen{0};
  options.item_verified = [&](const RestoredStep& reading, size_t index) {
    if (reading.items[index].name == "big") seen = HugeKbMappedFrom(dir_.path());
  };
  auto restored = stager_->RestoreInto(into, options);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 1);
  EXPECT_GE(seen.load(), 2048u) << "the restart's mapping is made of 4 KiB pages";
  EXPECT_EQ(big, s.big);
  EXPECT_EQ(small, s.small);
  stager_.reset();
  ckpt_.reset();
}

// A RAM disk with no room for the step files: the save fails naming the
// directory, rather than the process dying of SIGBUS at its first copy into
// a page the tmpfs cannot give; the step before stays.
TEST_F(InPlaceTest, ARamDiskWithoutRoomFailsTheSaveClearly) {
  const TestMount ram(dir_.path(), "size=6m");
  if (!ram.why().empty()) GTEST_SKIP() << ram.why();
  Open(2);
  Save(1, HostState(1));  // 3 MiB: the second step's files do not fit
  const HostState s(2);
  auto items = s.Items();
  auto r = stager_->Save(2, items);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find(dir_.path()), std::string::npos) << r.status().ToString();
  // Refused before a page was made, not once the RAM disk was full.
  EXPECT_NE(r.status().message().find("bytes needed"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(ListSteps(dir_.path()).value(), std::vector<int64_t>{1});
  ExpectStep(1, HostState(1));
  stager_.reset();
  ckpt_.reset();
}

// A larger state the oldest step's files cannot grow into on a full RAM
// disk: the save is refused before that step is retired, so both steps
// kept stay, and no temporary directory holds pages.
TEST_F(InPlaceTest, AStateTooBigForTheRamDiskKeepsTheStepItWouldRecycle) {
  const TestMount ram(dir_.path(), "size=8m");
  if (!ram.why().empty()) GTEST_SKIP() << ram.why();
  SaveTwoStepsAndReopen();
  auto r = SaveBytes(3, std::vector<uint8_t>(6 << 20, 7));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("step 1 is kept"), std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(TempDirs().empty());
  EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{1, 2}));
  ExpectStep(1, HostState(1));
  ExpectStep(2, HostState(2));
  stager_.reset();
  ckpt_.reset();
}

// The oldest step retired, its files cannot be reshaped (an I/O error
// past the room check): the save fails and no temporary directory is left
// holding the retired step's pages (nothing frees them until the next
// Open).
TEST_F(InPlaceTest, ARetiredStepWhoseFilesCannotBeReshapedLeavesNoFilesBehind) {
  FaultInjectionEnv env;
  SaveTwoStepsAndReopen(&env);
  env.FailAt(Op::kTruncate, 1, EIO, /*sticky=*/true);
  auto r = SaveBytes(3, std::vector<uint8_t>(6 << 20, 7));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("injected fault"), std::string::npos)
      << r.status().ToString();
  EXPECT_TRUE(TempDirs().empty());
  EXPECT_EQ(ListSteps(dir_.path()).value(), std::vector<int64_t>{2});
  ExpectStep(2, HostState(2));
  stager_.reset();  // before the Env they use
  ckpt_.reset();
}

// The room a save needs is counted beside the pages of the files it
// reshapes: the retired step's 3 MiB grown to 4 MiB fit an 8 MiB RAM disk
// holding two steps, where 4 MiB more would not.
TEST_F(InPlaceTest, TheFilesOfARetiredStepCountTowardTheRoomItsSaveNeeds) {
  const TestMount ram(dir_.path(), "size=8m");
  if (!ram.why().empty()) GTEST_SKIP() << ram.why();
  SaveTwoStepsAndReopen();
  const std::vector<uint8_t> bigger = RandomData(4 << 20, 9);
  auto r = SaveBytes(3, bigger);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{2, 3}));
  auto step = RestoreStep(dir_.path(), 3);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  ASSERT_EQ(step->Find("big")->data.size(), bigger.size());
  EXPECT_EQ(std::memcmp(step->Find("big")->data.data(), bigger.data(), bigger.size()), 0);
  stager_.reset();
  ckpt_.reset();
}

TEST_F(InPlaceTest, APlannedRestoreCopiesWhatThePlanNamesAndKeepsTheRest) {
  Open(2);
  HostState s(1);
  Save(1, s);
  std::vector<uint8_t> big(kBigItem), small(kSmallItem);
  int planned = 0;
  auto restored =
      stager_->RestorePlanned("step", [&](const RestoredStep& reading, const RestoredItem& key) {
        ++planned;
        EXPECT_EQ(reading.step, 1);
        EXPECT_EQ(*reinterpret_cast<const int64_t*>(key.data.data()), 1);
        return StatusOr<std::vector<MutableDeviceItem>>(BigInto(big));
      });
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(planned, 1);
  EXPECT_EQ(big, s.big);
  EXPECT_EQ(small, std::vector<uint8_t>(kSmallItem, 0));  // not planned: left in host memory
  const RestoredItem* kept = restored->Find("small");
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(std::memcmp(kept->data.data(), s.small.data(), kSmallItem), 0);
  // A destination of the wrong size is refused, naming the item.
  auto wrong = stager_->RestorePlanned("step", [&](const RestoredStep&, const RestoredItem&) {
    return StatusOr<std::vector<MutableDeviceItem>>(std::vector<MutableDeviceItem>{
        {"small", DType::kUInt8, {1}, small.data(), 1, -1, nullptr}});
  });
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("\"small\""), std::string::npos)
      << wrong.status().ToString();
  // No key item: nothing is planned or copied.
  planned = 0;
  auto none = stager_->RestorePlanned("absent", [&](const RestoredStep&, const RestoredItem&) {
    ++planned;
    return StatusOr<std::vector<MutableDeviceItem>>(std::vector<MutableDeviceItem>{});
  });
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(planned, 0);
}

// The key item is read first, even when it is not the smallest, and the
// other reading threads go on verifying while `plan` runs (strata.torch's
// planner is Python, walking the whole state): the chunks they verify
// meanwhile are copied once the plan is made.
TEST_F(InPlaceTest, APlannedRestoreReadsTheKeyFirstAndReadsOnWhileItPlans) {
  Open(2);
  HostState s(3);
  Save(1, s);
  std::mutex mu;
  std::condition_variable reported;
  std::vector<std::string> order;  // the items of the chunks reported, in turn
  RestoreOptions options;
  options.chunk_verified = [&](const RestoredStep& r, size_t item, uint64_t, uint64_t) {
    std::lock_guard<std::mutex> l(mu);
    order.push_back(r.items[item].name);
    reported.notify_all();
  };
  std::vector<uint8_t> big(kBigItem);
  bool read_on = false;
  auto restored = stager_->RestorePlanned(
      "small",
      [&](const RestoredStep&, const RestoredItem&) {
        // Waits (bounded: the planner used to hold every reading thread)
        // for a chunk of "big" to be verified by another thread.
        std::unique_lock<std::mutex> l(mu);
        read_on = reported.wait_for(l, std::chrono::seconds(30), [&] {
          return std::count(order.begin(), order.end(), "big") > 0;
        });
        return StatusOr<std::vector<MutableDeviceItem>>(BigInto(big));
      },
      options);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(order.front(), "small") << "the key item was not read first";
  EXPECT_TRUE(read_on) << "no other chunk was verified while the plan was made";
  EXPECT_EQ(big, s.big);
}

// A step of a directory restored without a checkpointer (strata.dcp's
// reader, another rank's copy): on a tmpfs it is verified and copied where
// its files are, through a mapping of them, and not read into other memory
// first; on a disk it is read. The bytes are the step's either way, and a
// corrupt chunk is found.
TEST_F(InPlaceTest, APlannedRestoreOfADirectoryOnATmpfsVerifiesTheStepWhereItsFilesAre) {
  if (!IsTmpfs(dir_.path())) GTEST_SKIP() << dir_.path() << " is not on a tmpfs";
  Open(2);
  HostState s(1);
  Save(1, s);
  std::vector<uint8_t> big(kBigItem);
  auto plan = [&](const RestoredStep&, const RestoredItem&) {
    return StatusOr<std::vector<MutableDeviceItem>>(BigInto(big));
  };
  auto mapped = RestoreStepPlanned(dir_.path(), 1, "step", plan, 2);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_EQ(big, s.big);
  const RestoredItem* small = mapped->Find("small");
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(std::memcmp(small->data.data(), s.small.data(), kSmallItem), 0);
  EXPECT_EQ(MappingAt(small->data.data()).file.rfind(dir_.Sub("1/"), 0), 0u)
      << MappingAt(small->data.data()).file;

  ScratchDir disk("in-place-disk", std::filesystem::current_path().string());
  if (IsTmpfs(disk.path())) GTEST_SKIP() << disk.path() << " is on a tmpfs too";
  std::filesystem::copy(dir_.Sub("1"), disk.Sub("1"), std::filesystem::copy_options::recursive);
  big.assign(kBigItem, 0);
  auto read = RestoreStepPlanned(disk.path(), 1, "step", plan, 2);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(big, s.big);
  EXPECT_EQ(MappingAt(read->Find("small")->data.data()).file, "");  // anonymous memory

  *mapped = RestoredStep();  // the mapping is let go before the file is changed
  auto info = ReadStepInfo(dir_.path(), 1);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const ItemInfo& item = info->items[0];
  FlipByte(dir_.Sub("1/" + info->files[item.file].name), item.offset);
  auto corrupt = RestoreStepPlanned(dir_.path(), 1, "step", plan, 2);
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss) << corrupt.status().ToString();
}

// A step another reader holds mapped (strata.dcp's reader, a restore of the
// directory in another process) while saves go on: no save takes its files,
// so the bytes the reader verified stay the step's. Retention removes the
// step all the same, the saves in the meantime make new files, and once the
// reader lets go recycling resumes. Both with the saver's own mapping of
// the step's files (`reopen` false) and without (a new process: the files
// would be reshaped).
void ExpectHeldStepIntact(const RestoredStep& held, const HostState& s) {
  const RestoredItem* big = held.Find("big");
  const RestoredItem* small = held.Find("small");
  ASSERT_TRUE(big != nullptr && small != nullptr);
  EXPECT_EQ(std::memcmp(big->data.data(), s.big.data(), kBigItem), 0)
      << "big changed under its reader";
  EXPECT_EQ(std::memcmp(small->data.data(), s.small.data(), kSmallItem), 0);
}

class InPlaceReaderTest : public InPlaceTest, public ::testing::WithParamInterface<bool> {};

TEST_P(InPlaceReaderTest, AStepBeingReadIsNotRecycledUnderItsReader) {
  if (!IsTmpfs(dir_.path())) GTEST_SKIP() << dir_.path() << " is not on a tmpfs";
  if (GetParam()) {
    SaveTwoStepsAndReopen();
  } else {
    Open(2);
    Save(1, HostState(1));
    Save(2, HostState(2));
  }
  std::vector<uint8_t> big(kBigItem);
  auto plan = [&](const RestoredStep&, const RestoredItem&) {
    return StatusOr<std::vector<MutableDeviceItem>>(BigInto(big));
  };
  auto held = RestoreStepPlanned(dir_.path(), 1, "step", plan, 2);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(MappingAt(held->Find("small")->data.data()).file.rfind(dir_.Sub("1/"), 0), 0u);
  const auto first = Inodes(dir_.Sub("1"));
  for (int v = 3; v <= 4; ++v) {
    Save(v, HostState(v));
    ExpectHeldStepIntact(*held, HostState(1));
    ExpectStep(v, HostState(v));
    EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{v - 1, v}));
  }
  for (const auto& [name, inode] : Inodes(dir_.Sub("4"))) {
    EXPECT_NE(first.at(name), inode) << "step 4 took the held step's " << name;
  }
  *held = RestoredStep();  // the reader lets go
  Save(5, HostState(5));
  Save(6, HostState(6));
  ExpectStep(6, HostState(6));
  EXPECT_EQ(ListSteps(dir_.path()).value(), (std::vector<int64_t>{5, 6}));
  EXPECT_LE(TempDirs().size(), 1u);  // at most the free slot
}

INSTANTIATE_TEST_SUITE_P(InPlace, InPlaceReaderTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Reopened" : "Mapped"; });

}  // namespace
}  // namespace strata
