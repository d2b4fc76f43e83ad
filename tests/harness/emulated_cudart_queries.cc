// Copyright 2026 The Strata Authors.
//
// The emulated runtime's calls that need none of its state (emulated_cudart.cc
// has the devices' memory, streams and events, and its header comment the
// rules): errors, and what PyTorch's CUDA build makes besides Strata's calls
// -- device properties and attributes, versions, driver entry points, memory
// sizes, stream priorities and capture status (the rest through the C ABI)
// -- and the few driver calls torch makes by opening libcuda.so.1 itself,
// and which host memory could be page-locked. Preloaded (LD_PRELOAD)
// and found as libcuda.so.1, the library runs torch's CUDA tensors, and strata.torch and strata.dcp
// above them, unchanged (python/tests/test_emulated_cuda.py). Kernels are not emulated: a launch
// fails with cudaErrorNotSupported.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "emulated_cudart.h"

namespace {

// Each code this runtime returns: the runtime's name and message for it.
struct ErrorText {
  int code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {0, "cudaSuccess", "no error"},
    {1, "cudaErrorInvalidValue", "invalid argument"},
    {2, "cudaErrorMemoryAllocation", "out of memory"},
    {100, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {101, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {400, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {600, "cudaErrorNotReady", "device not ready"},
    {712, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {713, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {719, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {801, "cudaErrorNotSupported", "operation not supported"},
    {900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {901, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
};

const ErrorText& ErrorOf(int code) {
  static constexpr ErrorText kUnknown = {999, "cudaErrorUnknown", "unknown error"};
  for (const ErrorText& e : kErrors) {
    if (e.code == code) return e;
  }
  return kUnknown;
}

int Devices() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}

}  // namespace

extern "C" {

int cudaGetDevice(int* device) {
  *device = strata::emulated_cuda::current_device;
  return 0;
}
int cudaGetLastError() {
  const int e = strata::emulated_cuda::last_error;
  strata::emulated_cuda::last_error = 0;
  return e;
}
int cudaPeekAtLastError() { return strata::emulated_cuda::last_error; }
const char* cudaGetErrorString(int error) { return ErrorOf(error).text; }
const char* cudaGetErrorName(int error) { return ErrorOf(error).name; }

// Each device reads as a 9.0 device (the H100/H200 class) with 80 GiB.
// Offsets in CUDA 13's struct cudaDeviceProp (1,008 bytes, driver_types.h);
// the test reads the name and capability back through torch, so a layout
// that moved fails there.
int cudaGetDeviceProperties(void* prop, int device) {
  if (prop == nullptr || device < 0 || device >= Devices()) {
    return strata::emulated_cuda::kInvalidDevice;
  }
  auto* bytes = static_cast<unsigned char*>(prop);
  std::memset(bytes, 0, 1008);
  std::snprintf(reinterpret_cast<char*>(bytes), 256, "Strata emulated device %d", device);
  const auto put = [bytes](size_t offset, auto value) {
    std::memcpy(bytes + offset, &value, sizeof value);
  };
  put(288, size_t{80} << 30);  // totalGlobalMem
  put(296, size_t{48} << 10);  // sharedMemPerBlock
  put(308, 32);                // warpSize
  put(320, 1024);              // maxThreadsPerBlock
  put(360, 9);                 // major
  put(364, 0);                 // minor
  put(384, 132);               // multiProcessorCount
  put(392, 1);                 // canMapHostMemory
  put(572, device);            // pciDeviceID
  put(584, 2);                 // asyncEngineCount
  put(588, 1);                 // unifiedAddressing
  return 0;
}
int cudaDeviceGetAttribute(int* value, int attribute, int device) {
  if (value == nullptr || device < 0 || device >= Devices()) {
    return strata::emulated_cuda::kInvalidDevice;
  }
  switch (attribute) {  // cudaDeviceAttr
    case 1:             // MaxThreadsPerBlock
      *value = 1024;
      return 0;
    case 10:  // WarpSize
      *value = 32;
      return 0;
    case 16:  // MultiProcessorCount
      *value = 132;
      return 0;
    case 75:  // ComputeCapabilityMajor
      *value = 9;
      return 0;
    case 76:  // ComputeCapabilityMinor
      *value = 0;
      return 0;
    default:
      *value = 0;
      return 0;
  }
}
int cudaDriverGetVersion(int* version) {
  *version = 13020;
  return 0;
}
int cudaRuntimeGetVersion(int* version) {
  *version = 13020;
  return 0;
}
// No driver API: every entry point is "not found" (c10 then does without).
int cudaGetDriverEntryPointByVersion(const char*, void** function, unsigned, unsigned long long,
                                     int* status) {
  if (function != nullptr) *function = nullptr;
  if (status != nullptr) *status = 1;  // cudaDriverEntryPointSymbolNotFound
  return 0;
}
int cudaMemGetInfo(size_t* free, size_t* total) {
  strata::emulated_cuda::UseContext();
  *free = *total = size_t{80} << 30;
  return 0;
}
int cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }
int cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  strata::emulated_cuda::UseContext();
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return 0;
}
int cudaStreamCreate(void** stream) { return cudaStreamCreateWithFlags(stream, 0); }
int cudaStreamCreateWithPriority(void** stream, unsigned flags, int) {
  return cudaStreamCreateWithFlags(stream, flags);
}
int cudaStreamGetPriority(void*, int* priority) {
  strata::emulated_cuda::UseContext();
  *priority = 0;
  return 0;
}
int cudaStreamIsCapturing(void*, int* status) {
  strata::emulated_cuda::UseContext();
  *status = 0;  // cudaStreamCaptureStatusNone: graphs are not emulated
  return 0;
}
int cudaStreamGetCaptureInfo(void*, int* status, unsigned long long* id, void** graph,
                             const void** dependencies, const void** edges, size_t* count) {
  strata::emulated_cuda::UseContext();
  if (status != nullptr) *status = 0;
  if (id != nullptr) *id = 0;
  if (graph != nullptr) *graph = nullptr;
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  return 0;
}
int cudaEventCreate(void** event) { return cudaEventCreateWithFlags(event, 0); }
int cudaEventRecordWithFlags(void* event, void* stream, unsigned) {
  return cudaEventRecord(event, stream);
}
int cudaDeviceCanAccessPeer(int* can, int, int) {
  *can = 0;
  return 0;
}
struct Dim3 {
  unsigned x, y, z;
};
int cudaLaunchKernel(const void*, Dim3, Dim3, void**, size_t, void*) {
  return strata::emulated_cuda::Fail(strata::emulated_cuda::kNotSupported,
                                     "cudaLaunchKernel: kernels are not emulated");
}
// What nvcc's launch stubs call (CUDA 13), for torch's <<<...>>> launches.
int __cudaLaunchKernel(const void*, Dim3, Dim3, void**, size_t, void*) {
  return strata::emulated_cuda::Fail(strata::emulated_cuda::kNotSupported,
                                     "__cudaLaunchKernel: kernels are not emulated");
}
int cudaLaunchKernelExC(const void*, const void*, void**) {
  return strata::emulated_cuda::Fail(strata::emulated_cuda::kNotSupported,
                                     "cudaLaunchKernelExC: kernels are not emulated");
}

// The driver calls torch makes by opening libcuda.so.1 itself (its lazy
// driver stubs): the test puts a libcuda.so.1 that is this library on the
// library path, so both names load one object, one state.
int cuInit(unsigned) { return 0; }
int cuDriverGetVersion(int* version) { return cudaDriverGetVersion(version); }
int cuDevicePrimaryCtxGetState(int device, unsigned* flags, int* active) {
  if (device < 0 || device >= Devices()) return 101;  // CUDA_ERROR_INVALID_DEVICE
  if (flags != nullptr) *flags = 0;
  if (active != nullptr) *active = strata::emulated_cuda::ContextMade(device) ? 1 : 0;
  return 0;
}
int cuCtxGetCurrent(void** context) {
  // A handle per device; none before the thread's first call that uses one.
  *context = strata::emulated_cuda::context_current
                 ? reinterpret_cast<void*>(uintptr_t{1} + strata::emulated_cuda::current_device)
                 : nullptr;
  return 0;
}
int cuGetErrorString(int error, const char** text) {
  *text = cudaGetErrorString(error);
  return 0;
}
int cuGetErrorName(int error, const char** text) {
  *text = cudaGetErrorName(error);
  return 0;
}

}  // extern "C"

namespace strata::emulated_cuda {

std::string Unpinnable(const void* p, size_t size) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + size + page - 1) / page * page;
  std::vector<unsigned char> resident((end - first) / page);
  if (::mincore(reinterpret_cast<void*>(first), end - first, resident.data()) != 0) {
    return "not mapped";
  }
  // /proc/self/maps lists the mappings in address order.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t at = first;
  while (at < end && std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3 || hi <= at) continue;
    if (lo > at || perms[0] != 'r' || perms[1] != 'w') break;
    at = hi;
  }
  return at >= end ? "" : "not writable memory";
}

}  // namespace strata::emulated_cuda
