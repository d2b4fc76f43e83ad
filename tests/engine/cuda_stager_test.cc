// Copyright 2026 The Strata Authors.
//
// CudaStager (include/strata/cuda.h) on a real GPU: bytes saved from and
// restored into device memory bit for bit, copies ordered after the caller's
// stream, overlapped saves that later writes cannot reach, a mismatch that
// writes nothing, a fallback that overwrites what a corrupt step copied.
// Without a CUDA runtime or a device every GPU test skips, saying why; the
// first test runs everywhere. Built as cuda_emulated_tests, the runtime is
// the emulated one (harness/emulated_cudart.cc) and every test runs.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "engine/cuda_runtime.h"
#include "format/naming.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/mutex.h"

namespace strata {
namespace {

using testing::RandomData;
using testing::ScratchDir;

#ifdef STRATA_EMULATED_CUDART
// Before any test: Runtime::Load() and CudaStager::Open() load this one.
[[maybe_unused]] const bool kEmulated = setenv("STRATA_CUDART", STRATA_EMULATED_CUDART, 1) == 0;
#endif

// A function the emulated runtime offers tests (harness/emulated_cudart*.cc);
// null on a real runtime.
template <typename Fn>
Fn* EmulatorHook(const char* name) {
#ifdef STRATA_EMULATED_CUDART
  if (void* lib = dlopen(STRATA_EMULATED_CUDART, RTLD_NOW | RTLD_NOLOAD)) {
    return reinterpret_cast<Fn*>(dlsym(lib, name));
  }
#endif
  static_cast<void>(name);
  return nullptr;
}

// The bytes the emulated runtime holds page-locked; nullopt on a real one
// (which cannot tell).
std::optional<size_t> EmulatedLockedBytes() {
  if (auto* fn = EmulatorHook<size_t()>("strata_emulated_cuda_locked_bytes")) return fn();
  return std::nullopt;
}

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

// Device memory for a test, freed with it.
class DeviceBuffer {
 public:
  DeviceBuffer(const cuda::Runtime& rt, size_t size) : rt_(rt), size_(size) {
    EXPECT_TRUE(rt_.Check(rt_.cudaMalloc(&p_, std::max<size_t>(size, 1)), "cudaMalloc", "").ok());
  }
  ~DeviceBuffer() { rt_.cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return p_; }
  size_t size() const { return size_; }
  void Upload(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(bytes.size(), size_);
    ASSERT_EQ(rt_.cudaMemcpy(p_, bytes.data(), size_, cuda::kMemcpyHostToDevice), 0);
  }
  void Fill(int value) {
    ASSERT_EQ(rt_.cudaMemsetAsync(p_, value, size_, nullptr), 0);
    ASSERT_EQ(rt_.cudaDeviceSynchronize(), 0);
  }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> out(size_);
    EXPECT_EQ(rt_.cudaMemcpy(out.data(), p_, size_, cuda::kMemcpyDeviceToHost), 0);
    return out;
  }

 private:
  const cuda::Runtime& rt_;
  size_t size_;
  void* p_ = nullptr;
};

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

class CudaStagerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = cuda::Runtime::Load();
    if (!rt.ok()) GTEST_SKIP() << "no CUDA runtime: " << rt.status().ToString();
    int count = 0;
    const int err = (*rt)->cudaGetDeviceCount(&count);
    if (err != 0 || count == 0) {
      GTEST_SKIP() << "no CUDA device: " << (*rt)->Check(err, "cudaGetDeviceCount", "").ToString();
    }
    rt_ = std::move(*rt);
    devices_ = count;
    CheckpointerOptions o;
    o.preemption_signals = {};
    o.max_to_keep = 3;
    auto ckpt = Checkpointer::Open(dir_.path(), o);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    ckpt_ = std::move(*ckpt);
    OpenStager({});
  }
  void TearDown() override {
    stager_.reset();
    ckpt_.reset();
  }
  // The checkpointer opened again, keeping `max_to_keep` steps, with a
  // stager of its own.
  void ReopenKeeping(int max_to_keep) {
    CheckpointerOptions o;
    o.preemption_signals = {};
    o.max_to_keep = max_to_keep;
    stager_.reset();
    ckpt_.reset();
    auto ckpt = Checkpointer::Open(dir_.path(), o);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    ckpt_ = std::move(*ckpt);
    OpenStager({});
  }
  void OpenStager(const CudaStagerOptions& options) {
    stager_.reset();
    auto stager = CudaStager::Open(ckpt_.get(), options);
    ASSERT_TRUE(stager.ok()) << stager.status().ToString();
    stager_ = std::move(*stager);
  }
  // The bytes of `name` in committed step `step`, read back from the files
  // by the engine alone.
  std::vector<uint8_t> OnDisk(int64_t step, const std::string& name) {
    auto restored = RestoreStep(dir_.path(), step);
    EXPECT_TRUE(restored.ok()) << restored.status().ToString();
    if (!restored.ok()) return {};
    const RestoredItem* item = restored->Find(name);
    EXPECT_NE(item, nullptr) << name;
    if (item == nullptr) return {};
    auto* p = reinterpret_cast<const uint8_t*>(item->data.data());
    return std::vector<uint8_t>(p, p + item->data.size());
  }
  static DeviceItem Saved(const std::string& name, const DeviceBuffer& b, int device = 0,
                          void* stream = nullptr) {
    return {name,   DType::kUInt8, {static_cast<int64_t>(b.size())}, b.data(), b.size(),
            device, stream};
  }
  static MutableDeviceItem Target(const std::string& name, const DeviceBuffer& b, int device = 0) {
    return {name,   DType::kUInt8, {static_cast<int64_t>(b.size())}, b.data(), b.size(),
            device, nullptr};
  }

  ScratchDir dir_{"cuda"};
  std::unique_ptr<cuda::Runtime> rt_;
  int devices_ = 0;
  std::unique_ptr<Checkpointer> ckpt_;
  std::unique_ptr<CudaStager> stager_;
};

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
  auto step = stager_->RestoreInto(into);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, 1);
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
  ASSERT_TRUE(stager_->RestoreInto({&target, 1}).ok());
  EXPECT_EQ(a.Download(), bytes);
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
  auto again = RestoreStepPlanned(dir_.path(), 3, "tree", plan, 2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(a.Download(), abytes);
  std::vector<std::byte> ahost(a.size()), bhost(b.size());
  std::vector<std::byte*> dst = {ahost.data(), bhost.data()};
  ASSERT_TRUE(CopyToHost(std::vector<DeviceItem>{Saved("a", a, 0), Saved("b", b, last)}, dst).ok());
  EXPECT_EQ(std::memcmp(ahost.data(), abytes.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(bhost.data(), bbytes.data(), b.size()), 0);
  auto refused = CopyToHost(std::vector<DeviceItem>{Saved("a", a, devices_)}, dst);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("\"a\""), std::string::npos) << refused.ToString();
}

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
}

// A host thread waiting for copies sleeps: on a device, a wait on an event
// made without cudaEventBlockingSync, or on a stream or the device, spins a
// core for as long as the copies take (seconds a save, beside the trainer's
// data loaders and communication threads). Only the emulated runtime
// counts such waits.
TEST_F(CudaStagerGpuTest, WaitsForCopiesSleep) {
  auto* spins = EmulatorHook<uint64_t()>("strata_emulated_cuda_spin_waits");
  if (spins == nullptr) GTEST_SKIP() << "a real runtime does not tell how a wait waits";
  DeviceBuffer a(*rt_, (300 << 20) + 1), b(*rt_, a.size());  // more than one lane mark
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

}  // namespace
}  // namespace strata
