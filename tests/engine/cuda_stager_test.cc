// Copyright 2026 The Strata Authors.
//
// CudaStager (include/strata/cuda.h) on a real GPU: bytes saved from and
// restored into device memory bit for bit, copies ordered after the caller's
// stream, overlapped saves that later writes cannot reach, a mismatch that
// writes nothing, a fallback that overwrites what a corrupt step copied.
// Without a CUDA runtime or a device every GPU test skips, saying why; the
// first test runs everywhere. Built as cuda_emulated_tests, the runtime is
// the emulated one (harness/emulated_cudart.cc) and every test runs.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "cuda_stager_fixture.h"
#include "engine/cuda_runtime.h"
#include "format/naming.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"
#include "test_util.h"

namespace strata {
namespace {

using testing::RandomData;
using testing::ScratchDir;

#ifdef STRATA_EMULATED_CUDART
// Before any test: Runtime::Load() and CudaStager::Open() load this one.
[[maybe_unused]] const bool kEmulated = setenv("STRATA_CUDART", STRATA_EMULATED_CUDART, 1) == 0;
#endif

TEST(CudaStagerTest, WithoutTheRuntimeOpenIsUnavailableNamingWhatWasTried) {
  ScratchDir d("cuda");
  CheckpointerOptions o;
  o.preemption_signals = {};
  auto ckpt = Checkpointer::Open(d.path(), o);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  CudaStagerOptions so;
  so.runtime_library = d.Sub("libcudart-missing.so");
  auto stager = CudaStager::Open(ckpt->get(), so);
  ASSERT_FALSE(stager.ok());
  EXPECT_EQ(stager.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(stager.status().message().find("libcudart-missing.so"), std::string::npos)
      << stager.status().ToString();
  EXPECT_FALSE(CudaStager::Open(nullptr).ok());
}

TEST_F(CudaStagerGpuTest, BlockingSaveAndRestoreAreBitExactForEverySize) {
  const std::vector<size_t> sizes = {1, 0, 666, 4 << 20, (9 << 20) + 5};
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<DeviceItem> items;
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers.push_back(std::make_unique<DeviceBuffer>(*rt_, sizes[i]));
    bytes.push_back(RandomData(sizes[i], 7 + static_cast<uint32_t>(i)));
    buffers.back()->Upload(bytes.back());
    items.push_back(Saved("d" + std::to_string(i), *buffers.back()));
  }
  // A float tensor and a host buffer in the same state.
  DeviceBuffer floats(*rt_, 4 * 1000);
  std::vector<uint8_t> float_bytes = RandomData(floats.size(), 99);
  floats.Upload(float_bytes);
  items.push_back({"w", DType::kFloat32, {10, 100}, floats.data(), floats.size(), 0, nullptr});
  std::vector<uint8_t> host = RandomData(17 * 8, 5);
  items.push_back({"host", DType::kInt64, {17}, host.data(), host.size(), -1, nullptr});

  auto saved = stager_->Save(1, items, DeviceSaveMode::kBlocking);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  ASSERT_TRUE(ckpt_->Wait().ok());
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(OnDisk(1, "d" + std::to_string(i)), bytes[i]);
  EXPECT_EQ(OnDisk(1, "w"), float_bytes);
  EXPECT_EQ(OnDisk(1, "host"), host);
  EXPECT_TRUE(stager_->status().staging_pinned);
  EXPECT_GE(stager_->status().staging_bytes, (13u << 20));

  std::vector<MutableDeviceItem> into;
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers[i]->Fill(0);
    into.push_back(Target("d" + std::to_string(i), *buffers[i]));
  }
  floats.Fill(0);
  into.push_back({"w", DType::kFloat32, {10, 100}, floats.data(), floats.size(), 0, nullptr});
  std::vector<uint8_t> host_back(host.size());
  into.push_back({"host", DType::kInt64, {17}, host_back.data(), host_back.size(), -1, nullptr});
  const std::optional<size_t> pageable = EmulatedPageableCopies();
  auto step = stager_->RestoreInto(into);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 1);
  // The step's files are the page-locked ones the save copied into.
  EXPECT_EQ(EmulatedPageableCopies(), pageable);
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(buffers[i]->Download(), bytes[i]) << i;
  EXPECT_EQ(floats.Download(), float_bytes);
  EXPECT_EQ(host_back, host);
}

// Work that is still queued on the item's stream when Save() is called: the
// copy must wait for it. The write comes behind a chain of device-to-device
// copies (milliseconds), and the staging memory exists already, so a copy
// that did not wait would read the old bytes.
TEST_F(CudaStagerGpuTest, TheCopyFollowsWorkEnqueuedOnTheItemsStream) {
  cuda::Stream stream = nullptr;
  ASSERT_EQ(rt_->cudaStreamCreateWithFlags(&stream, cuda::kStreamNonBlocking), 0);
  DeviceBuffer big(*rt_, 256 << 20), scratch(*rt_, 256 << 20);
  big.Fill(0x11);
  DeviceItem item = Saved("big", big, 0, stream);
  ASSERT_TRUE(stager_->Save(1, {&item, 1}, DeviceSaveMode::kBlocking).ok());
  for (int i = 0; i < 32; ++i) {
    ASSERT_EQ(rt_->cudaMemcpyAsync(scratch.data(), big.data(), big.size(), 3, stream), 0);
  }
  ASSERT_EQ(rt_->cudaMemsetAsync(big.data(), 0x5a, big.size(), stream), 0);
  ASSERT_TRUE(stager_->Save(2, {&item, 1}, DeviceSaveMode::kBlocking).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(OnDisk(1, "big"), std::vector<uint8_t>(big.size(), 0x11));
  EXPECT_EQ(OnDisk(2, "big"), std::vector<uint8_t>(big.size(), 0x5a));
  rt_->cudaStreamDestroy(stream);
}

// The restore's copy into a buffer follows the work queued on the buffer's
// stream before RestoreInto() (here: a chain of copies that ends by
// overwriting it), so the restored bytes are what the buffer holds after.
TEST_F(CudaStagerGpuTest, ARestoreFollowsWorkQueuedOnTheBuffersStream) {
  DeviceBuffer big(*rt_, 256 << 20), junk(*rt_, 256 << 20);
  big.Fill(0x21);
  junk.Fill(0x99);
  DeviceItem item = Saved("big", big);
  ASSERT_TRUE(stager_->Save(1, {&item, 1}).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  cuda::Stream stream = nullptr;
  ASSERT_EQ(rt_->cudaStreamCreateWithFlags(&stream, cuda::kStreamNonBlocking), 0);
  for (int i = 0; i < 32; ++i) {
    ASSERT_EQ(rt_->cudaMemcpyAsync(big.data(), junk.data(), big.size(), 3, stream), 0);
  }
  MutableDeviceItem target = Target("big", big);
  target.stream = stream;
  ASSERT_TRUE(stager_->RestoreInto({&target, 1}).ok());
  ASSERT_EQ(rt_->cudaStreamSynchronize(stream), 0);
  EXPECT_EQ(big.Download(), std::vector<uint8_t>(big.size(), 0x21));
  rt_->cudaStreamDestroy(stream);
}

// A blocking save hands its step over while its copies are still queued,
// so that the checksums follow the copies instead of starting once the last
// byte landed; Save() itself still returns with every copy done. Here the
// copies wait behind a chain of device-to-device copies on the item's
// stream: the save must be in flight while that stream still works.
TEST_F(CudaStagerGpuTest, ABlockingSaveIsCommittingWhileItsCopiesLand) {
  cuda::Stream stream = nullptr;
  ASSERT_EQ(rt_->cudaStreamCreateWithFlags(&stream, cuda::kStreamNonBlocking), 0);
  DeviceBuffer saved_buffer(*rt_, 1 << 20), from(*rt_, 64 << 20), to(*rt_, 64 << 20);
  saved_buffer.Fill(0x3c);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(rt_->cudaMemcpyAsync(to.data(), from.data(), from.size(), 3, stream), 0);
  }
  std::atomic<bool> returned{false};
  std::optional<int> query;  // of the item's stream, when the save was first seen in flight
  std::thread watcher([&] {
    while (!returned.load()) {
      if (ckpt_->status().in_flight_step == 1) {
        query = rt_->cudaStreamQuery(stream);
        rt_->cudaGetLastError();  // cudaErrorNotReady is no error of the test's
        return;
      }
      std::this_thread::yield();
    }
  });
  DeviceItem item = Saved("x", saved_buffer, 0, stream);
  auto saved = stager_->Save(1, {&item, 1}, DeviceSaveMode::kBlocking);
  returned = true;
  watcher.join();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_FALSE(stager_->status().copies_in_flight);
  ASSERT_TRUE(query.has_value()) << "the save was not in flight before Save() returned";
  EXPECT_EQ(*query, 600) << "the save was handed over only once the stream was done";
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(OnDisk(1, "x"), std::vector<uint8_t>(saved_buffer.size(), 0x3c));
  rt_->cudaStreamDestroy(stream);
}

// A copy that fails after the save was handed over (a device fault the
// host's waits report) fails Save() with its error, once, blocking or
// overlapped (for a buffer Save() waits for in either mode: one that is not
// deferrable): the step is not committed, and the next save neither
// reports it again nor finds anything amiss.
TEST_F(CudaStagerGpuTest, ACopyThatFailsAfterTheHandOverFailsTheSaveOnce) {
  auto* fail = EmulatorHook<void(bool)>("strata_emulated_cuda_fail_event_waits");
  if (fail == nullptr) GTEST_SKIP() << "needs the emulated runtime to fail a host wait";
  DeviceBuffer a(*rt_, 3 << 20);
  DeviceItem item = Saved("a", a);
  item.deferrable = false;
  int64_t step = 0;
  for (DeviceSaveMode mode : {DeviceSaveMode::kBlocking, DeviceSaveMode::kOverlapped}) {
    SCOPED_TRACE(mode == DeviceSaveMode::kBlocking ? "blocking" : "overlapped");
    a.Fill(0x17);
    ASSERT_TRUE(stager_->Save(++step, {&item, 1}, mode).ok());
    ASSERT_TRUE(stager_->WaitStaged().ok());
    ASSERT_TRUE(ckpt_->Wait().ok());
    fail(true);
    const int64_t failing = ++step;
    auto failed = stager_->Save(failing, {&item, 1}, mode);
    fail(false);
    ASSERT_FALSE(failed.ok());
    EXPECT_NE(failed.status().message().find("unspecified launch failure"), std::string::npos)
        << failed.status().ToString();
    EXPECT_FALSE(stager_->status().copies_in_flight);
    Status again = ckpt_->Wait();
    EXPECT_TRUE(again.ok()) << "reported again: " << again.ToString();
    a.Fill(0x18);
    auto saved = stager_->Save(++step, {&item, 1}, mode);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    ASSERT_TRUE(stager_->WaitStaged().ok());
    ASSERT_TRUE(ckpt_->Wait().ok());
    EXPECT_FALSE(
        std::filesystem::exists(std::filesystem::path(dir_.path()) / StepDirName(failing)));
    EXPECT_EQ(OnDisk(step, "a"), std::vector<uint8_t>(a.size(), 0x18));
  }
}

// The same for a checkpointer that commits before Save() returns: the save
// fails with the copy's error, and only once.
TEST_F(CudaStagerGpuTest, ACopyThatFailsFailsACommittingSaveOnce) {
  auto* fail = EmulatorHook<void(bool)>("strata_emulated_cuda_fail_event_waits");
  if (fail == nullptr) GTEST_SKIP() << "needs the emulated runtime to fail a host wait";
  CheckpointerOptions o;
  o.preemption_signals = {};
  o.async = false;
  Reopen(o);
  DeviceBuffer a(*rt_, 3 << 20);
  a.Fill(0x27);
  DeviceItem item = Saved("a", a);
  fail(true);
  auto failed = stager_->Save(1, {&item, 1});
  fail(false);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("unspecified launch failure"), std::string::npos)
      << failed.status().ToString();
  auto saved = stager_->Save(2, {&item, 1});
  ASSERT_TRUE(saved.ok()) << "reported again: " << saved.status().ToString();
  EXPECT_TRUE(saved->committed);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir_.path()) / StepDirName(1)));
  EXPECT_EQ(OnDisk(2, "a"), std::vector<uint8_t>(a.size(), 0x27));
}

// A blocking save whose own wait fails while its checksums' waits did not
// (the copies landed for the threads that commit it; only Save()'s wait
// after them failed) stands once committed: Save() collects the save,
// returns it and logs the failed wait, and the next save finds nothing
// amiss. (A checkpointer that commits before Save() returns waits for the
// copies on Save()'s own thread, so there the wait fails the save.)
TEST_F(CudaStagerGpuTest, ASaveCommittedDespiteItsFailedWaitStands) {
  auto* fail = EmulatorHook<void(bool)>("strata_emulated_cuda_fail_event_waits_here");
  if (fail == nullptr) GTEST_SKIP() << "needs the emulated runtime to fail one thread's waits";
  DeviceBuffer a(*rt_, 3 << 20);
  DeviceItem item = Saved("a", a);
  a.Fill(0x41);
  fail(true);
  auto saved = stager_->Save(1, {&item, 1}, DeviceSaveMode::kBlocking);
  fail(false);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_FALSE(stager_->status().copies_in_flight);
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(OnDisk(1, "a"), std::vector<uint8_t>(a.size(), 0x41));
  a.Fill(0x4f);
  auto next = stager_->Save(2, {&item, 1}, DeviceSaveMode::kBlocking);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(OnDisk(2, "a"), std::vector<uint8_t>(a.size(), 0x4f));
}

TEST_F(CudaStagerGpuTest, AnOverlappedSaveIsNotReachedByWritesOrderedAfterStaging) {
  cuda::Stream stream = nullptr;
  ASSERT_EQ(rt_->cudaStreamCreateWithFlags(&stream, cuda::kStreamNonBlocking), 0);
  DeviceBuffer big(*rt_, 256 << 20);
  big.Fill(0x22);
  DeviceItem item = Saved("big", big, 0, stream);
  auto saved = stager_->Save(1, {&item, 1}, DeviceSaveMode::kOverlapped);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  // The "optimizer step": enqueued at once, after the stream waits for the copy.
  ASSERT_TRUE(stager_->OrderAfterStaging(stream, 0).ok());
  ASSERT_EQ(rt_->cudaMemsetAsync(big.data(), 0x33, big.size(), stream), 0);
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(OnDisk(1, "big"), std::vector<uint8_t>(big.size(), 0x22));
  ASSERT_EQ(rt_->cudaStreamSynchronize(stream), 0);
  EXPECT_EQ(big.Download(), std::vector<uint8_t>(big.size(), 0x33));
  // The next save waits for the copies on the host; the state is new again.
  ASSERT_TRUE(stager_->Save(2, {&item, 1}, DeviceSaveMode::kOverlapped).ok());
  ASSERT_TRUE(stager_->WaitStaged().ok());
  EXPECT_FALSE(stager_->status().copies_in_flight);
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(OnDisk(2, "big"), std::vector<uint8_t>(big.size(), 0x33));
  rt_->cudaStreamDestroy(stream);
}

TEST_F(CudaStagerGpuTest, ARestoreThatDoesNotMatchWritesNoBuffer) {
  DeviceBuffer a(*rt_, 4096), b(*rt_, 1 << 20);
  a.Upload(RandomData(a.size(), 1));
  b.Upload(RandomData(b.size(), 2));
  std::vector<DeviceItem> items = {Saved("a", a), Saved("b", b)};
  ASSERT_TRUE(stager_->Save(1, items).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  a.Fill(0x44);
  b.Fill(0x44);
  std::vector<MutableDeviceItem> into = {Target("a", a), Target("b", b)};
  into[1].shape = {1024, 1024};  // the step has b as [1048576]
  auto step = stager_->RestoreInto(into);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(step.status().message().find("\"b\""), std::string::npos) << step.status().ToString();
  EXPECT_EQ(a.Download(), std::vector<uint8_t>(a.size(), 0x44));
  EXPECT_EQ(b.Download(), std::vector<uint8_t>(b.size(), 0x44));

  // A newer step that does not match is not skipped for an older one that
  // does (a mismatch is not corruption), as with Checkpointer::RestoreInto.
  std::vector<DeviceItem> reshaped = items;
  reshaped[1].shape = {1024, 1024};
  ASSERT_TRUE(stager_->Save(2, reshaped).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  into[1].shape = {1 << 20};
  auto newest = stager_->RestoreInto(into);
  ASSERT_FALSE(newest.ok());
  EXPECT_EQ(newest.status().code(), StatusCode::kInvalidArgument) << newest.status().ToString();
  EXPECT_EQ(b.Download(), std::vector<uint8_t>(b.size(), 0x44));
}

TEST_F(CudaStagerGpuTest, AFallbackOverwritesWhatTheCorruptStepCopied) {
  DeviceBuffer small(*rt_, 4096), big(*rt_, 8 << 20);
  const auto small1 = RandomData(small.size(), 1), big1 = RandomData(big.size(), 2);
  small.Upload(small1);
  big.Upload(big1);
  std::vector<DeviceItem> items = {Saved("small", small), Saved("big", big)};
  ASSERT_TRUE(stager_->Save(1, items).ok());
  small.Upload(RandomData(small.size(), 3));
  big.Upload(RandomData(big.size(), 4));
  ASSERT_TRUE(stager_->Save(2, items).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  // The last byte of step 2's data is the big item's: read last (smallest
  // items first), after "small" was copied onto the device.
  const std::string file = dir_.path() + "/2/" + DataFileName(0);
  testing::FlipByte(file, std::filesystem::file_size(file) - 1);
  small.Fill(0);
  big.Fill(0);
  std::atomic<size_t> reported{0};  // called from the reading threads
  RestoreOptions options;
  options.item_verified = [&](const RestoredStep&, size_t) { ++reported; };
  std::vector<MutableDeviceItem> into = {Target("small", small), Target("big", big)};
  auto step = stager_->RestoreInto(into, options);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 1);
  EXPECT_GE(reported.load(), 3u);  // step 2's small, then step 1's two items
  EXPECT_EQ(small.Download(), small1);
  EXPECT_EQ(big.Download(), big1);
}

TEST_F(CudaStagerGpuTest, PageableStagingStillSavesAndRestores) {
  CudaStagerOptions o;
  o.pin = false;
  OpenStager(o);
  DeviceBuffer a(*rt_, (3 << 20) + 3);
  const auto bytes = RandomData(a.size(), 8);
  a.Upload(bytes);
  DeviceItem item = Saved("a", a);
  ASSERT_TRUE(stager_->Save(1, {&item, 1}, DeviceSaveMode::kOverlapped).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_FALSE(stager_->status().staging_pinned);
  EXPECT_EQ(OnDisk(1, "a"), bytes);
  a.Fill(0);
  MutableDeviceItem target = Target("a", a);
  const std::optional<size_t> pageable = EmulatedPageableCopies();
  ASSERT_TRUE(stager_->RestoreInto({&target, 1}).ok());
  EXPECT_EQ(a.Download(), bytes);
  if (pageable) {
    EXPECT_GT(EmulatedPageableCopies(), pageable);  // no page-locked chunks either
  }
}

TEST_F(CudaStagerGpuTest, ItemsOnSeveralDevicesAndBadOrdinalsAreRefused) {
  DeviceBuffer a(*rt_, 1 << 20);
  DeviceItem bad = Saved("a", a, devices_);
  auto refused = stager_->Save(1, {&bad, 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("\"a\""), std::string::npos)
      << refused.status().ToString();
  // A host item whose size disagrees with its shape is refused before any
  // byte is copied (it would be read past its end).
  std::vector<uint8_t> small(16);
  DeviceItem lying{"h", DType::kUInt8, {16}, small.data(), 1 << 20, -1, nullptr};
  auto refused_host = stager_->Save(1, {&lying, 1});
  ASSERT_FALSE(refused_host.ok());
  EXPECT_EQ(refused_host.status().code(), StatusCode::kInvalidArgument);
  if (devices_ < 2) GTEST_SKIP() << "one CUDA device: the two-device half needs two";
  ASSERT_EQ(rt_->cudaSetDevice(1), 0);
  DeviceBuffer b(*rt_, 1 << 20);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  const auto abytes = RandomData(a.size(), 1), bbytes = RandomData(b.size(), 2);
  a.Upload(abytes);
  b.Upload(bbytes);
  std::vector<DeviceItem> items = {Saved("a", a, 0), Saved("b", b, 1)};
  ASSERT_TRUE(stager_->Save(1, items).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_EQ(OnDisk(1, "b"), bbytes);
  a.Fill(0);
  ASSERT_EQ(rt_->cudaSetDevice(1), 0);
  b.Fill(0);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  std::vector<MutableDeviceItem> into = {Target("a", a, 0), Target("b", b, 1)};
  ASSERT_TRUE(stager_->RestoreInto(into).ok());
  EXPECT_EQ(a.Download(), abytes);
  EXPECT_EQ(b.Download(), bbytes);
}

// Steps saved from device memory into the step files, recycled as retention
// removes steps: each file mapping is page-locked once and released when it
// is unmapped (the emulated runtime refuses a range locked twice and aborts
// on one released under a queued copy), and the bytes are each step's.
TEST_F(CudaStagerGpuTest, RecycledStepFilesStayPageLockedAndHoldEachStep) {
  ReopenKeeping(2);
  const int last = devices_ - 1;
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  DeviceBuffer b(*rt_, (1 << 20) + 7);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  DeviceBuffer a(*rt_, (3 << 20) + 5);
  std::vector<uint8_t> host(4096);
  std::vector<DeviceItem> items = {
      Saved("a", a, 0),
      Saved("b", b, last),
      {"h", DType::kUInt8, {4096}, host.data(), host.size(), -1, nullptr}};
  ASSERT_TRUE(stager_->Reserve(items).ok());
  uint64_t held = 0;
  for (int v = 1; v <= 6; ++v) {
    const auto abytes = RandomData(a.size(), v), bbytes = RandomData(b.size(), 50 + v);
    host = RandomData(host.size(), 90 + v);
    items[2].data = host.data();
    a.Upload(abytes);
    b.Upload(bbytes);
    const auto mode = v % 2 ? DeviceSaveMode::kBlocking : DeviceSaveMode::kOverlapped;
    auto saved = stager_->Save(v, items, mode);
    ASSERT_TRUE(saved.ok()) << "step " << v << ": " << saved.status().ToString();
    ASSERT_TRUE(ckpt_->Wait().ok());
    EXPECT_EQ(OnDisk(v, "a"), abytes) << "step " << v;
    EXPECT_EQ(OnDisk(v, "b"), bbytes) << "step " << v;
    EXPECT_EQ(OnDisk(v, "h"), host) << "step " << v;
    EXPECT_TRUE(stager_->status().staging_pinned) << "step " << v;
    if (v == 4) held = stager_->status().staging_bytes;
    if (v > 4) {
      EXPECT_EQ(stager_->status().staging_bytes, held) << "step " << v;
    }
    if (auto locked = EmulatedLockedBytes()) {
      EXPECT_GE(*locked, stager_->status().staging_bytes) << "step " << v;
    }
  }
  stager_.reset();  // releases what it locked
  if (auto locked = EmulatedLockedBytes()) {
    EXPECT_EQ(*locked, 0u);
  }
}

// The driver says which primary contexts exist: none on a device the
// process has not used (cudaGetDevice makes none), one once it is set
// (CUDA 12 and later make it there). Run alone: an earlier test in the
// same process has made device 0's.
TEST_F(CudaStagerGpuTest, PrimaryContextMadeTellsWhatTheDriverHas) {
  const std::optional<bool> before = rt_->PrimaryContextMade(0);
  if (!before.has_value()) {
    GTEST_SKIP() << "the driver's cuDevicePrimaryCtxGetState is not found (or CUDA < 12)";
  }
  if (*before) GTEST_SKIP() << "device 0 has a context already (run this test alone)";
  int current = -1;
  ASSERT_EQ(rt_->cudaGetDevice(&current), 0);
  EXPECT_EQ(rt_->PrimaryContextMade(0), std::optional<bool>(false));
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  EXPECT_EQ(rt_->PrimaryContextMade(0), std::optional<bool>(true));
}

// A process that uses only its last device (a rank of eight on a node sees
// all eight): no context is made on device 0 -- on a GPU, hundreds of MiB of
// another rank's memory. The engine's thread page-locks and releases the
// step files, another thread waits for an overlapped save and closes the
// stager, and neither has used a device before.
TEST_F(CudaStagerGpuTest, NoContextIsMadeOnADeviceTheStateIsNotOn) {
  if (devices_ < 2) GTEST_SKIP() << "one CUDA device: a device not in use needs two";
  const std::optional<bool> before = rt_->PrimaryContextMade(0);
  if (!before.has_value()) GTEST_SKIP() << "the driver's cuDevicePrimaryCtxGetState is not found";
  if (*before) GTEST_SKIP() << "device 0 has a context already (run this test alone)";
  ReopenKeeping(2);  // retention recycles the step files: released, locked again
  const int last = devices_ - 1;
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  DeviceBuffer a(*rt_, (3 << 20) + 5), b(*rt_, 4096);
  std::vector<uint8_t> host(64);
  std::vector<DeviceItem> items = {
      Saved("a", a, last),
      Saved("b", b, last),
      {"h", DType::kUInt8, {64}, host.data(), host.size(), -1, nullptr}};
  ASSERT_TRUE(stager_->Reserve(items).ok());
  std::vector<uint8_t> abytes;
  for (int v = 1; v <= 5; ++v) {
    abytes = RandomData(a.size(), v);
    a.Upload(abytes);
    const auto mode = v % 2 ? DeviceSaveMode::kBlocking : DeviceSaveMode::kOverlapped;
    auto saved = stager_->Save(v, items, mode);
    ASSERT_TRUE(saved.ok()) << "step " << v << ": " << saved.status().ToString();
    if (mode == DeviceSaveMode::kOverlapped) {
      Status waited;
      std::thread([&] { waited = stager_->WaitStaged(); }).join();
      ASSERT_TRUE(waited.ok()) << waited.ToString();
    }
    ASSERT_TRUE(ckpt_->Wait().ok());
  }
  EXPECT_TRUE(stager_->status().staging_pinned);
  a.Fill(0);
  std::vector<MutableDeviceItem> into = {Target("a", a, last),
                                         Target("b", b, last),
                                         {"h", DType::kUInt8, {64}, host.data(), 64, -1, nullptr}};
  auto step = stager_->RestoreInto(into);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 5);
  EXPECT_EQ(a.Download(), abytes);
  // A stager made on a thread that has used no device learns its home
  // device from the first items or plan; a plan naming a device that does
  // not exist is refused and teaches it nothing: the next save's files are
  // page-locked.
  std::thread([&] { stager_.reset(); }).join();  // that thread is left on `last`
  std::thread([&] { OpenStager({}); }).join();
  auto bad = stager_->RestorePlanned(
      "h",
      [&](const RestoredStep&, const RestoredItem&) -> StatusOr<std::vector<MutableDeviceItem>> {
        return std::vector<MutableDeviceItem>{Target("a", a, devices_)};
      });
  ASSERT_FALSE(bad.ok());
  ASSERT_TRUE(stager_->Save(6, items).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  EXPECT_TRUE(stager_->status().staging_pinned);
  std::thread([&] { stager_.reset(); }).join();
  int current = -1;
  ASSERT_EQ(rt_->cudaGetDevice(&current), 0);
  EXPECT_EQ(current, last);  // the caller's device is kept
  EXPECT_EQ(rt_->PrimaryContextMade(last), std::optional<bool>(true));
  EXPECT_EQ(rt_->PrimaryContextMade(0), std::optional<bool>(false));
}

// The planned restore strata.torch and strata.dcp use: the key item says
// where the others go; each planned item lands on its device, the others
// stay in host memory.
TEST_F(CudaStagerGpuTest, APlannedRestoreCopiesEachItemToItsDevice) {
  const int last = devices_ - 1;
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  DeviceBuffer b(*rt_, 8 << 20);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  DeviceBuffer a(*rt_, 4099);
  const auto abytes = RandomData(a.size(), 1), bbytes = RandomData(b.size(), 2);
  a.Upload(abytes);
  b.Upload(bbytes);
  const std::string tree = "a b";
  std::vector<uint8_t> kept = RandomData(300, 3);
  std::vector<DeviceItem> items = {
      Saved("a", a, 0),
      Saved("b", b, last),
      {"tree", DType::kBytes, {3}, tree.data(), tree.size(), -1, nullptr},
      {"kept", DType::kUInt8, {300}, kept.data(), kept.size(), -1, nullptr}};
  auto saved = stager_->Save(3, items);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  ASSERT_TRUE(ckpt_->Wait().ok());
  a.Fill(0);
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  b.Fill(0);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);

  std::atomic<int> planned{0};
  auto plan = [&](const RestoredStep& reading,
                  const RestoredItem& key) -> StatusOr<std::vector<MutableDeviceItem>> {
    ++planned;
    EXPECT_EQ(reading.step, 3);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(key.data.data()), key.data.size()), tree);
    return std::vector<MutableDeviceItem>{Target("a", a, 0), Target("b", b, last)};
  };
  auto restored = stager_->RestorePlanned("tree", plan);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(planned.load(), 1);
  EXPECT_EQ(a.Download(), abytes);
  EXPECT_EQ(b.Download(), bbytes);
  const RestoredItem* k = restored->Find("kept");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(k->data.data()),
                                 reinterpret_cast<const uint8_t*>(k->data.data()) + 300),
            kept);

  // The same without a checkpointer (a directory another component owns),
  // and the snapshot copy DCP's stager makes.
  a.Fill(0);
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  b.Fill(0);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  const std::optional<size_t> pageable = EmulatedPageableCopies();
  auto again = RestoreStepPlanned(dir_.path(), 3, "tree", plan, 2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(a.Download(), abytes);
  EXPECT_EQ(b.Download(), bbytes);
  EXPECT_EQ(EmulatedPageableCopies(),
            pageable);  // mapped from the tmpfs, copied through chunks
  std::vector<std::byte> ahost(a.size()), bhost(b.size());
  std::vector<std::byte*> dst = {ahost.data(), bhost.data()};
  ASSERT_TRUE(CopyToHost(std::vector<DeviceItem>{Saved("a", a, 0), Saved("b", b, last)}, dst).ok());
  EXPECT_EQ(std::memcmp(ahost.data(), abytes.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(bhost.data(), bbytes.data(), b.size()), 0);
  auto refused = CopyToHost(std::vector<DeviceItem>{Saved("a", a, devices_)}, dst);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("\"a\""), std::string::npos) << refused.ToString();
}

// The restore of a restarted job: the step's files are mapped by a
// checkpointer that never page-locked them (as in a fresh process). Every
// copy to a device goes through page-locked chunks, none from the pageable
// mapping (such a copy holds the reading thread and runs at a fraction of
// the speed); the bytes are exact, on each device, and the chunks are
// freed once the restore returns.
TEST_F(CudaStagerGpuTest, ARestartedJobRestoresThroughPageLockedChunks) {
  const int last = devices_ - 1;
  const std::vector<size_t> sizes = {(9 << 20) + 5, 4096, 100, 1, 0};
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<DeviceItem> items;
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers.push_back(std::make_unique<DeviceBuffer>(*rt_, sizes[i]));
    bytes.push_back(RandomData(sizes[i], 20 + static_cast<uint32_t>(i)));
    buffers.back()->Upload(bytes.back());
    items.push_back(Saved("d" + std::to_string(i), *buffers.back()));
  }
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  DeviceBuffer other(*rt_, (5 << 20) + 3);
  const auto other_bytes = RandomData(other.size(), 30);
  other.Upload(other_bytes);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  items.push_back(Saved("other", other, last));
  std::vector<uint8_t> host = RandomData(777, 31);
  items.push_back({"host", DType::kUInt8, {777}, host.data(), host.size(), -1, nullptr});
  ASSERT_TRUE(stager_->Save(1, items).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());

  ReopenKeeping(3);
  CudaStagerOptions options;
  options.reserve_after_restore = false;  // nothing page-locked for a next save
  OpenStager(options);
  std::vector<MutableDeviceItem> into;
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers[i]->Fill(0);
    into.push_back(Target("d" + std::to_string(i), *buffers[i]));
  }
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  other.Fill(0);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  into.push_back(Target("other", other, last));
  std::vector<uint8_t> host_back(host.size());
  into.push_back({"host", DType::kUInt8, {777}, host_back.data(), host_back.size(), -1, nullptr});
  const std::optional<size_t> locked = EmulatedLockedBytes();
  const std::optional<size_t> pageable = EmulatedPageableCopies();
  auto step = stager_->RestoreInto(into);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 1);
  EXPECT_EQ(EmulatedPageableCopies(), pageable);
  EXPECT_EQ(EmulatedLockedBytes(), locked);
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(buffers[i]->Download(), bytes[i]) << i;
  ASSERT_EQ(rt_->cudaSetDevice(last), 0);
  EXPECT_EQ(other.Download(), other_bytes);
  ASSERT_EQ(rt_->cudaSetDevice(0), 0);
  EXPECT_EQ(host_back, host);
}

// Where nothing can be page-locked (a process past its RLIMIT_MEMLOCK), a
// restart's restore copies from pageable memory instead, bit for bit.
TEST_F(CudaStagerGpuTest, ARestoreThatCannotPageLockCopiesFromPageableMemory) {
  auto* refuse = EmulatorHook<void(bool)>("strata_emulated_cuda_refuse_page_locking");
  if (refuse == nullptr) GTEST_SKIP() << "needs the emulated runtime to refuse page-locking";
  DeviceBuffer a(*rt_, (5 << 20) + 1);
  const auto bytes = RandomData(a.size(), 50);
  a.Upload(bytes);
  ASSERT_TRUE(stager_->Save(1, std::vector<DeviceItem>{Saved("a", a)}).ok());
  ASSERT_TRUE(ckpt_->Wait().ok());
  ReopenKeeping(3);
  CudaStagerOptions options;
  options.reserve_after_restore = false;
  OpenStager(options);
  a.Fill(0);
  const std::optional<size_t> pageable = EmulatedPageableCopies();
  refuse(true);
  MutableDeviceItem target = Target("a", a);
  auto step = stager_->RestoreInto({&target, 1});
  refuse(false);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(a.Download(), bytes);
  EXPECT_GT(EmulatedPageableCopies(), pageable);
}

}  // namespace
}  // namespace strata
