// Copyright 2026 The Strata Authors.
//
// What the CUDA stager's tests share (cuda_stager_test.cc,
// cuda_runtime_rules_test.cc): device buffers, the emulated runtime's test
// hooks, and the fixture that skips without a runtime or a device.
#ifndef STRATA_TESTS_ENGINE_CUDA_STAGER_FIXTURE_H_
#define STRATA_TESTS_ENGINE_CUDA_STAGER_FIXTURE_H_

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cuda_runtime.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"
#include "test_util.h"

namespace strata {

// A function the emulated runtime offers tests (harness/emulated_cudart*.cc);
// null on a real runtime.
template <typename Fn>
inline Fn* EmulatorHook(const char* name) {
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
inline std::optional<size_t> EmulatedLockedBytes() {
  if (auto* fn = EmulatorHook<size_t()>("strata_emulated_cuda_locked_bytes")) return fn();
  return std::nullopt;
}

// The asynchronous copies so far between a device and pageable host memory
// on the emulated runtime; nullopt on a real one.
inline std::optional<size_t> EmulatedPageableCopies() {
  if (auto* fn = EmulatorHook<size_t()>("strata_emulated_cuda_pageable_copies")) return fn();
  return std::nullopt;
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
    Reopen(o);
  }
  // The checkpointer opened again with `o`, with a stager of its own.
  void Reopen(const CheckpointerOptions& o) {
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

  testing::ScratchDir dir_{"cuda"};
  std::unique_ptr<cuda::Runtime> rt_;
  int devices_ = 0;
  std::unique_ptr<Checkpointer> ckpt_;
  std::unique_ptr<CudaStager> stager_;
};

}  // namespace strata

#endif  // STRATA_TESTS_ENGINE_CUDA_STAGER_FIXTURE_H_
