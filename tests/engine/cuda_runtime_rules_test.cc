// Copyright 2026 The Strata Authors.
//
// The CUDA stager under the runtime's rules that only a device enforces, or
// only the emulated runtime shows (harness/emulated_cudart_capture.cc):
// another thread's graph capture that Strata's calls must not break, host
// waits that must sleep rather than spin, a refused call whose error must
// not stay with the thread, step files on a disk that must not be
// page-locked, and page-locked chunks a copy still reads that must not be
// handed out. Built into cuda_tests and cuda_emulated_tests with
// cuda_stager_test.cc.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_stager_fixture.h"
#include "engine/cuda_runtime.h"
#include "engine/device_lanes.h"
#include "engine/host_bounce.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/mutex.h"

namespace strata {
namespace {

using testing::RandomData;
using testing::ScratchDir;

// A CUDA graph captured in the global mode (the runtime's default, and
// torch.cuda.graph's) on a thread of its own while the object lives: on a
// real runtime a stream's capture of a memset of `target`, on the emulated
// one its stand-in. End() ends it: 0, or the runtime's error when a call
// another thread made meanwhile broke the capture's rules.
class GraphCapture {
 public:
  GraphCapture(const cuda::Runtime& rt, const DeviceBuffer& target) {
    thread_ = std::thread([this, &rt, &target] { Run(rt, target); });
    MutexLock l(&mu_);
    while (!begun_) cv_.Wait(&mu_);
  }
  ~GraphCapture() { End(); }
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  int End() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
    return ended_;
  }

 private:
  void Run(const cuda::Runtime& rt, const DeviceBuffer& target) {
    auto* begin_emulated = EmulatorHook<void()>("strata_emulated_cuda_begin_capture");
    auto* end_emulated = EmulatorHook<int()>("strata_emulated_cuda_end_capture");
    void* lib = dlopen(rt.path().c_str(), RTLD_NOW | RTLD_NOLOAD);
    using Begin = int(void*, int);
    using EndCapture = int(void*, void**);
    using Destroy = int(void*);
    auto* begin = lib ? reinterpret_cast<Begin*>(dlsym(lib, "cudaStreamBeginCapture")) : nullptr;
    auto* end = lib ? reinterpret_cast<EndCapture*>(dlsym(lib, "cudaStreamEndCapture")) : nullptr;
    auto* destroy = lib ? reinterpret_cast<Destroy*>(dlsym(lib, "cudaGraphDestroy")) : nullptr;
    cuda::Stream stream = nullptr;
    if (begin_emulated != nullptr) {
      begin_emulated();
    } else {
      EXPECT_TRUE(begin != nullptr && end != nullptr && destroy != nullptr) << rt.path();
      EXPECT_EQ(rt.cudaSetDevice(0), 0);
      EXPECT_EQ(rt.cudaStreamCreateWithFlags(&stream, cuda::kStreamNonBlocking), 0);
      EXPECT_EQ(begin(stream, /*cudaStreamCaptureModeGlobal=*/0), 0);
      EXPECT_EQ(rt.cudaMemsetAsync(target.data(), 1, target.size(), stream), 0);
    }
    MutexLock l(&mu_);
    begun_ = true;
    cv_.SignalAll();
    while (!stop_) cv_.Wait(&mu_);
    if (begin_emulated != nullptr) {
      ended_ = end_emulated();
      return;
    }
    void* graph = nullptr;
    ended_ = end(stream, &graph);
    if (graph != nullptr) destroy(graph);
    rt.cudaGetLastError();
    rt.cudaStreamDestroy(stream);
  }

  std::thread thread_;
  Mutex mu_;
  CondVar cv_;
  bool begun_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  int ended_ = 0;  // written by the capturing thread before it ends
};

// A trainer that captures CUDA graphs (torch.cuda.graph, in the global mode
// by default) on one thread while Strata works on others: the step files
// page-locked on the engine's thread, the checksums' waits for the copies,
// retention recycling the files, a restore. Strata's calls are made in the
// relaxed mode, so none of them is refused or breaks the capture.
TEST_F(CudaStagerGpuTest, AGraphCapturedOnAnotherThreadIsNotBrokenBySavesAndRestores) {
  ReopenKeeping(2);
  DeviceBuffer a(*rt_, (5 << 20) + 3), b(*rt_, a.size()), scratch(*rt_, 4096);
  const auto abytes = RandomData(a.size(), 4);
  a.Upload(abytes);
  b.Fill(0);
  DeviceItem item = Saved("a", a);
  {
    GraphCapture capture(*rt_, scratch);
    ASSERT_TRUE(stager_->Reserve({&item, 1}).ok());
    for (int v = 1; v <= 4; ++v) {  // from the third, the files are recycled
      const auto mode = v % 2 ? DeviceSaveMode::kBlocking : DeviceSaveMode::kOverlapped;
      auto saved = stager_->Save(v, {&item, 1}, mode);
      ASSERT_TRUE(saved.ok()) << "step " << v << ": " << saved.status().ToString();
      Status committed = ckpt_->Wait();
      ASSERT_TRUE(committed.ok()) << "step " << v << ": " << committed.ToString();
      EXPECT_TRUE(stager_->status().staging_pinned) << "step " << v;
    }
    MutableDeviceItem target = Target("a", b);
    auto step = stager_->RestoreInto({&target, 1});
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    EXPECT_EQ(capture.End(), 0) << "a call of Strata's broke the other thread's capture";
  }
  EXPECT_EQ(OnDisk(4, "a"), abytes);
  EXPECT_EQ(b.Download(), abytes);
}

// Step files on a disk are not page-locked: a device's writes to
// page-locked file pages are not seen by the kernel, and the step's sync
// could miss them. Saves there copy into a page-locked block, reserved
// ahead like the files, and the engine writes the files from it.
TEST_F(CudaStagerGpuTest, StepFilesOnADiskAreWrittenFromAPageLockedBlock) {
  const std::string root = "/var/tmp";
  if (OnMemoryFilesystem(root)) GTEST_SKIP() << root << " is not on a disk here";
  ScratchDir disk("cuda-disk", root);
  CheckpointerOptions o;
  o.preemption_signals = {};
  o.max_to_keep = 2;
  auto ckpt = Checkpointer::Open(disk.path(), o);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto stager = CudaStager::Open(ckpt->get());
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();
  CudaStager& st = **stager;
  EXPECT_FALSE(st.status().in_place);
  DeviceBuffer a(*rt_, (3 << 20) + 5), b(*rt_, a.size());
  DeviceItem item = Saved("a", a);
  ASSERT_TRUE(st.Reserve({&item, 1}).ok());
  for (int i = 0; i < 2000 && st.status().reserving; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(st.status().reserving);
  const uint64_t block = st.status().staging_bytes;
  EXPECT_GE(block, a.size());
  EXPECT_TRUE(st.status().staging_pinned);
  for (int v = 1; v <= 3; ++v) {
    const auto bytes = RandomData(a.size(), 20 + v);
    a.Upload(bytes);
    auto saved = st.Save(v, {&item, 1}, DeviceSaveMode::kOverlapped);
    ASSERT_TRUE(saved.ok()) << "step " << v << ": " << saved.status().ToString();
    ASSERT_TRUE((*ckpt)->Wait().ok());
    auto restored = RestoreStep(disk.path(), v);
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    const auto* p = reinterpret_cast<const uint8_t*>(restored->Find("a")->data.data());
    EXPECT_EQ(std::vector<uint8_t>(p, p + a.size()), bytes) << "step " << v;
    EXPECT_EQ(st.status().staging_bytes, block) << "step " << v;  // the reserved block
    if (auto locked = EmulatedLockedBytes()) {
      EXPECT_EQ(*locked, block) << "step " << v;  // no step file
    }
  }
  MutableDeviceItem target = Target("a", b);
  auto step = st.RestoreInto({&target, 1});
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 3);
  EXPECT_EQ(b.Download(), a.Download());

  // Reservations while a save is in flight (its gate holds the commit):
  // the first waits for the save on a thread of its own, the second returns
  // at once and that thread takes its size too.
  std::atomic<bool> open{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    open = true;
  });
  auto held = st.Save(4, {&item, 1}, DeviceSaveMode::kOverlapped, [&] {
    while (!open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status::Ok();
  });
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  DeviceBuffer twice(*rt_, 2 * a.size()), thrice(*rt_, 3 * a.size());
  DeviceItem bigger = Saved("a", twice), biggest = Saved("a", thrice);
  ASSERT_TRUE(st.Reserve({&bigger, 1}).ok());
  ASSERT_TRUE(st.Reserve({&biggest, 1}).ok());
  EXPECT_FALSE(open) << "a reservation waited for the save in flight";
  opener.join();
  ASSERT_TRUE((*ckpt)->Wait().ok());
  for (int i = 0; i < 2000 && st.status().reserving; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(st.status().staging_bytes, thrice.size());
}

// A host thread waiting for copies sleeps: on a device, a wait on an event
// made without cudaEventBlockingSync, or on a stream or the device, spins a
// core for as long as the copies take (seconds a save, beside the trainer's
// data loaders and communication threads). Only the emulated runtime
// counts such waits.
TEST_F(CudaStagerGpuTest, WaitsForCopiesSleep) {
  auto* spins = EmulatorHook<uint64_t()>("strata_emulated_cuda_spin_waits");
  if (spins == nullptr) GTEST_SKIP() << "a real runtime does not tell how a wait waits";
  DeviceBuffer a(*rt_, (300 << 20) + 1), b(*rt_, a.size());  // past a lane mark
  a.Fill(0x5c);
  b.Fill(0);
  DeviceItem item = Saved("a", a);
  MutableDeviceItem target = Target("a", b);
  const uint64_t before = spins();
  ASSERT_TRUE(stager_->Save(1, {&item, 1}, DeviceSaveMode::kBlocking).ok());
  ASSERT_TRUE(stager_->Save(2, {&item, 1}, DeviceSaveMode::kOverlapped).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  ASSERT_TRUE(stager_->WaitStaged().ok());
  ASSERT_TRUE(stager_->RestoreInto({&target, 1}).ok());
  EXPECT_EQ(spins() - before, 0u);
  EXPECT_EQ(b.Download(), std::vector<uint8_t>(b.size(), 0x5c));
}

// A copy the runtime refuses fails the save, and the error is not left as
// the calling thread's last error, where the trainer's next check after a
// kernel (torch's) would report it. The emulated runtime refuses the copy
// at once; a device might fault later and lose the context, so only there.
TEST_F(CudaStagerGpuTest, AFailedCopyLeavesTheThreadNoErrorToReport) {
  if (EmulatorHook<size_t()>("strata_emulated_cuda_locked_bytes") == nullptr) {
    GTEST_SKIP() << "a copy past an allocation may fault a device";
  }
  DeviceBuffer a(*rt_, 4096);
  DeviceItem item = Saved("a", a);
  item.size = item.shape[0] = 8192;  // past the allocation's end
  auto saved = stager_->Save(1, {&item, 1}, DeviceSaveMode::kBlocking);
  ASSERT_FALSE(saved.ok());
  EXPECT_NE(saved.status().message().find("\"a\""), std::string::npos) << saved.status().ToString();
  EXPECT_EQ(rt_->cudaGetLastError(), 0);
}

// The chunks a restore copies pageable bytes through: at most the bound
// per device exist (a further Acquire waits for a Release), and a chunk
// released with a copy still to read it is handed out again only once that
// copy is done (the emulator runs each copy late: writing the chunk before
// it ran would change what lands on the device).
TEST_F(CudaStagerGpuTest, BounceChunksAreBoundedAndReusedOnlyOnceTheirCopiesAreDone) {
  DeviceLanes lanes(*rt_);
  HostBounce bounce(lanes, 1 << 20, 2);
  DeviceBuffer target(*rt_, 1 << 20);
  auto first = bounce.Acquire(0);
  auto second = bounce.Acquire(0);
  ASSERT_TRUE(first.ok() && second.ok() && *first != nullptr && *second != nullptr);
  EXPECT_NE((*first)->data, (*second)->data);
  const std::vector<uint8_t> bytes = RandomData(1 << 20, 41);
  std::memcpy((*first)->data, bytes.data(), bytes.size());

  std::atomic<bool> got{false};
  std::thread third([&] {
    auto chunk = bounce.Acquire(0);
    if (!chunk.ok() || *chunk == nullptr) {
      ADD_FAILURE() << "no chunk: " << chunk.status().ToString();
      return;
    }
    EXPECT_EQ((*chunk)->data, (*first)->data);
    got = true;
    std::memset((*chunk)->data, 0xff, 1 << 20);  // the copy must have read it already
    bounce.Release(*chunk, false);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load()) << "a third chunk was handed out beyond the bound of two";
  lanes.Begin();
  Status copied = lanes.Copy(0, nullptr, target.data(), (*first)->data, bytes.size(),
                             cuda::kMemcpyHostToDevice, "a chunk");
  if (copied.ok()) copied = lanes.Record(0, (*first)->copied);
  bounce.Release(*first, copied.ok());  // whatever happened: the thread must get a chunk
  third.join();
  ASSERT_TRUE(copied.ok()) << copied.ToString();
  EXPECT_TRUE(got.load());
  ASSERT_TRUE(lanes.Sync().ok());
  EXPECT_EQ(target.Download(), bytes);
  bounce.Release(*second, false);
}

}  // namespace
}  // namespace strata
