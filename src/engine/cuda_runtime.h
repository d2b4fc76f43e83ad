// Copyright 2026 The Strata Authors.
//
// The CUDA runtime API, loaded at run time with dlopen: libstrata neither
// links CUDA nor includes its headers, so it builds and runs on machines
// without it, and a trainer's process shares the one runtime its framework
// already loaded (dlopen of a loaded soname returns it).
//
// Only the calls Strata uses are declared, with the runtime's C ABI: every
// call returns cudaError_t (an int, 0 = cudaSuccess); streams and events are
// opaque pointers. The constants below are the runtime's own values, stable
// since CUDA 4.
#ifndef STRATA_ENGINE_CUDA_RUNTIME_H_
#define STRATA_ENGINE_CUDA_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::cuda {

using Stream = void*;  // cudaStream_t; nullptr is the legacy default stream
using Event = void*;   // cudaEvent_t

inline constexpr int kMemcpyHostToDevice = 1;
inline constexpr int kMemcpyDeviceToHost = 2;
inline constexpr unsigned kHostAllocPortable = 0x01;     // pinned for every device
inline constexpr unsigned kHostRegisterPortable = 0x01;  // registered for every device
inline constexpr unsigned kStreamNonBlocking = 0x01;     // no implicit sync with stream 0
inline constexpr unsigned kEventBlockingSync = 0x01;     // a host wait sleeps, not spins
inline constexpr unsigned kEventDisableTiming = 0x02;
inline constexpr int kStreamCaptureModeRelaxed = 2;  // cudaStreamCaptureMode
inline constexpr int kMemoryTypeHost = 1;            // cudaMemoryType: page-locked host memory

// struct cudaPointerAttributes, whose leading fields every runtime since
// CUDA 11 lays out alike (`type` is cudaMemoryTypeUnregistered, 0, for
// ordinary host memory). The runtime writes the whole struct of its own
// release: CUDA 13's ends in `long reserved[8]` (88 bytes), and `spare`
// leaves room for what a later release adds.
struct PointerAttributes {
  int type = 0;
  int device = -1;
  void* device_pointer = nullptr;
  void* host_pointer = nullptr;
  int64_t reserved[8] = {};
  unsigned char spare[168] = {};
};

// X(name, parameter list): every entry point, resolved by Load().
#define STRATA_CUDA_CALLS(X)                                                             \
  X(cudaGetDeviceCount, (int* count))                                                    \
  X(cudaGetDevice, (int* device))                                                        \
  X(cudaSetDevice, (int device))                                                         \
  X(cudaHostAlloc, (void** ptr, size_t size, unsigned flags))                            \
  X(cudaFreeHost, (void* ptr))                                                           \
  X(cudaHostRegister, (void* ptr, size_t size, unsigned flags))                          \
  X(cudaHostUnregister, (void* ptr))                                                     \
  X(cudaMalloc, (void** ptr, size_t size))                                               \
  X(cudaFree, (void* ptr))                                                               \
  X(cudaMemcpy, (void* dst, const void* src, size_t size, int kind))                     \
  X(cudaMemcpyAsync, (void* dst, const void* src, size_t size, int kind, Stream stream)) \
  X(cudaMemsetAsync, (void* ptr, int value, size_t size, Stream stream))                 \
  X(cudaStreamCreateWithFlags, (Stream * stream, unsigned flags))                        \
  X(cudaStreamDestroy, (Stream stream))                                                  \
  X(cudaStreamSynchronize, (Stream stream))                                              \
  X(cudaStreamQuery, (Stream stream))                                                    \
  X(cudaStreamWaitEvent, (Stream stream, Event event, unsigned flags))                   \
  X(cudaEventCreateWithFlags, (Event * event, unsigned flags))                           \
  X(cudaEventDestroy, (Event event))                                                     \
  X(cudaEventRecord, (Event event, Stream stream))                                       \
  X(cudaEventSynchronize, (Event event))                                                 \
  X(cudaDeviceSynchronize, ())                                                           \
  X(cudaThreadExchangeStreamCaptureMode, (int* mode))                                    \
  X(cudaPointerGetAttributes, (void* attributes, const void* ptr))

// One loaded runtime. Thread-safe (the runtime is). The library stays loaded
// for the life of the process: unloading a CUDA runtime under a framework
// that shares it is not safe.
class Runtime {
 public:
  // Loads `library` ("" = $STRATA_CUDART if set, else libcudart.so.13,
  // .so.12, .so.11.0, .so) and resolves every call. A runtime the process
  // already loaded (a framework's) is preferred, then the first that sees a
  // device (a toolkit newer than the driver sees none), then the first that
  // loads at all. UNAVAILABLE naming what was tried when none loads or a call
  // is missing. Asks for the device count (initializes the driver), creates no
  // context.
  static StatusOr<std::unique_ptr<Runtime>> Load(std::string_view library = "");

  // OK, or INTERNAL "CUDA <call> (<what>): <the runtime's message> [<code>]".
  // A failure is the calling thread's to handle here: it is taken off the
  // thread's last error (cudaGetLastError), so that the trainer's next
  // check after a kernel does not report it. Call on the thread that made
  // the failed call.
  Status Check(int error, std::string_view call, std::string_view what) const;

  const std::string& path() const { return path_; }

#define STRATA_CUDA_MEMBER(name, params) int(*name) params = nullptr;
  STRATA_CUDA_CALLS(STRATA_CUDA_MEMBER)
#undef STRATA_CUDA_MEMBER
  const char* (*cudaGetErrorString)(int error) = nullptr;
  int (*cudaGetLastError)() = nullptr;  // clears the thread's sticky error

  // Whether `device`'s primary context exists (the driver's
  // cuDevicePrimaryCtxGetState); nullopt when the driver's call could not
  // be found or failed, or the runtime is older than CUDA 12. Makes no
  // context.
  std::optional<bool> PrimaryContextMade(int device) const;

 private:
  Runtime() = default;
  std::string path_;  // what was loaded, for messages
  // CUresult cuDevicePrimaryCtxGetState(CUdevice, unsigned*, int*): from
  // the runtime's library if it has it, else from the driver the runtime
  // loaded (libcuda.so.1); null when neither has it.
  int (*primary_ctx_state_)(int device, unsigned* flags, int* active) = nullptr;
};

// Makes the calling thread's stream capture mode relaxed for its scope:
// while another thread captures a CUDA graph in the global mode (the
// default, torch.cuda.graph's too), a thread in the global mode may not
// make a potentially unsafe call (page-locking, a host wait): the call fails
// and the capture is invalidated. Strata's calls capture nothing and touch
// only its own streams and memory, so they are made relaxed. Made once the
// calling thread is on the device its calls concern: the runtime makes a
// context for most calls on the thread's current device, and is not
// documented to make none for this one.
class CaptureRelaxed {
 public:
  explicit CaptureRelaxed(const Runtime& rt) : rt_(rt) {
    if (rt_.cudaThreadExchangeStreamCaptureMode(&saved_) != 0) {
      rt_.cudaGetLastError();
      exchanged_ = false;
    }
  }
  ~CaptureRelaxed() {
    if (exchanged_ && rt_.cudaThreadExchangeStreamCaptureMode(&saved_) != 0) {
      rt_.cudaGetLastError();
    }
  }
  CaptureRelaxed(const CaptureRelaxed&) = delete;
  CaptureRelaxed& operator=(const CaptureRelaxed&) = delete;

 private:
  const Runtime& rt_;
  int saved_ = kStreamCaptureModeRelaxed;  // swapped in; then the thread's own
  bool exchanged_ = true;
};

// Keeps the current device of the calling thread for its scope: the runtime's
// device is per thread, and Strata's calls must not change the caller's.
// Restores it only if it changed, and only if its context exists: setting a
// device makes its context (hundreds of MiB of that GPU's memory), and a
// thread that never used a device reads device 0 as current without having
// a context there. Such a thread (one that only waits for a save, say) is
// left on the device Strata used. The driver is asked only when the device
// changed (not on the common path, where the caller's device is the one
// Strata used); a context that exists then either existed before the
// guard or was made for Strata's own work on that device.
class DeviceGuard {
 public:
  explicit DeviceGuard(const Runtime& rt) : rt_(rt) {
    if (rt_.cudaGetDevice(&saved_) != 0) {
      saved_ = -1;
      rt_.cudaGetLastError();  // not the caller's to see
    }
  }
  ~DeviceGuard() {
    int now = -1;
    if (saved_ >= 0 && rt_.cudaGetDevice(&now) == 0 && now != saved_ &&
        rt_.PrimaryContextMade(saved_).value_or(true) && rt_.cudaSetDevice(saved_) != 0) {
      rt_.cudaGetLastError();
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  const Runtime& rt_;
  int saved_ = -1;
};

}  // namespace strata::cuda

#endif  // STRATA_ENGINE_CUDA_RUNTIME_H_
