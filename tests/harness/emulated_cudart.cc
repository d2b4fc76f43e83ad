// Copyright 2026 The Strata Authors.
//
// The CUDA runtime emulated on host memory: its devices' memory, streams,
// events (emulated_cudart_queues.h) and page-locking, and the calls Strata
// makes (engine/cuda_runtime.h). Loaded as the runtime (STRATA_CUDART=<this library>), it
// runs the CUDA paths in every build's suite without a GPU, under ASan and
// TSan; with emulated_cudart_queries.cc, preloaded and found as
// libcuda.so.1, it also runs torch's CUDA tensors, and strata.torch and
// strata.dcp above them (python/tests/test_emulated_cuda.py). Kernels are
// not emulated. It does not stand in for a GPU run (scripts/gpu-check.sh);
// it keeps the rules a device enforces, and shows some a device does not:
//
//  * Device memory is not host memory. cudaMalloc returns an address mapped
//    with no access; the bytes live in a second mapping of the same memfd
//    that only this library touches. Host code that dereferences a device
//    pointer faults at once.
//  * Copies check direction and bounds: a device address must lie, with all
//    the bytes copied, inside one allocation, of the stream's device; a host
//    address inside none. Else cudaErrorInvalidValue, and the reason on
//    stderr. (The stream's device is stricter than unified addressing
//    needs; Strata copies each item on its own device's lane, so a copy
//    elsewhere is a bug of ours.)
//  * Streams are asynchronous: each has a thread that runs its operations in
//    order, each after STRATA_EMU_CUDA_DELAY_US (default 300) microseconds,
//    to widen the window in which host code could read bytes a copy has not
//    written yet. A cudaMemcpyAsync between a device and page-locked memory
//    (cudaHostAlloc, cudaHostRegister) returns at once; with pageable
//    memory it returns once the copy is done, as the runtime documents. The
//    host learns that work is done only through what the runtime offers
//    (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize,
//    a synchronous call): host code that reads staged bytes without one of
//    them reads old bytes (the delay sees to it), and TSan checks the
//    synchronization of the callers' threads with the streams'.
//  * Events capture the work enqueued before cudaEventRecord; a wait
//    (cudaEventSynchronize, cudaStreamWaitEvent) waits for that capture.
//    An event is recorded only on a stream of its own device, as the
//    runtime's cudaEventRecord requires (invalid resource handle).
//  * Page-locking: cudaHostRegister refuses a range that overlaps one
//    already page-locked (cudaErrorHostMemoryAlreadyRegistered), is not
//    mapped, or has a page it cannot pin for writing (no access: a gap in
//    a reservation; read-only); cudaHostUnregister refuses an address it
//    did not register (cudaErrorHostMemoryNotRegistered). Unregistering
//    or freeing page-locked memory that a queued copy still uses is
//    undefined on a device; here it aborts, naming the call.
//  * STRATA_EMU_CUDA_DEVICES devices (default 2; 0: cudaErrorNoDevice);
//    the current device is per thread, as is cudaGetLastError's error.
//  * Primary contexts are made as the runtime makes them (emulated_cudart.h,
//    UseContext), and the driver's cuDevicePrimaryCtxGetState tells which
//    were, so a test sees a context made on a device the process does not
//    use (on a GPU, hundreds of MiB of that device's memory).
//  * strata_emulated_cuda_locked_bytes(), not the runtime's, tells a test
//    how much memory is page-locked, so it can see that what was locked is
//    released; strata_emulated_cuda_pageable_copies() how many asynchronous
//    copies touched pageable memory, so it can see that a path meant to
//    copy from page-locked memory does; and the faults a test sets
//    (emulated_cudart_faults.cc) make page-locking fail, or host waits
//    report a fault in the work they waited for.
//  * Stream capture's rules for other threads and host waits that would
//    spin a core: emulated_cudart_capture.cc.
//
// Simplifications: cudaStreamDestroy and cudaFree wait for the work they
// concern (the runtime defers the release instead); the legacy default
// stream does not synchronize with other blocking streams (Strata's streams
// are non-blocking; a test relying on that sync would fail here, not pass).
#include "emulated_cudart.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emulated_cudart_queues.h"
#include "util/mutex.h"

namespace strata::emulated_cuda {

STRATA_EMU_TLS thread_local int current_device = 0;
STRATA_EMU_TLS thread_local int last_error = kSuccess;
STRATA_EMU_TLS thread_local bool context_current = false;

namespace {
std::atomic<uint64_t> contexts_made{0};  // bit d: device d's primary context
}  // namespace

void UseContext() {
  contexts_made.fetch_or(uint64_t{1} << current_device);
  context_current = true;
}

bool ContextMade(int device) {
  return device >= 0 && device < 64 && (contexts_made.load() >> device & 1) != 0;
}

int Fail(int code, const std::string& why) {
  std::fprintf(stderr, "strata emulated CUDA: %s\n", why.c_str());
  last_error = code;
  return code;
}

namespace {

// cudaMemcpyKind.
constexpr int kHostToHost = 0;
constexpr int kHostToDevice = 1;
constexpr int kDeviceToHost = 2;
constexpr int kDeviceToDevice = 3;
constexpr int kDefault = 4;

std::string Hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

struct Allocation {
  size_t size;
  int device;
  std::byte* bytes;  // the mapping this library reads and writes
  size_t mapped;     // the two mappings' length
};

struct Locked {  // page-locked host memory
  size_t size;
  bool allocated;  // cudaHostAlloc's (else cudaHostRegister's)
  int in_use = 0;  // queued copies that read or write it
};

class Runtime {
 public:
  Runtime()
      : devices_(EnvInt("STRATA_EMU_CUDA_DEVICES", 2)),
        delay_(EnvInt("STRATA_EMU_CUDA_DELAY_US", 300)) {}

  int devices() const { return devices_; }

  int SetDevice(int device) {
    if (device < 0 || device >= devices_) {
      return Fail(kInvalidDevice, "cudaSetDevice(" + std::to_string(device) +
                                      "): " + std::to_string(devices_) + " devices");
    }
    current_device = device;
    UseContext();  // since CUDA 12
    return kSuccess;
  }

  int Malloc(void** out, size_t size) EXCLUDES(mu_);
  int Free(void* p) EXCLUDES(mu_);
  int HostAlloc(void** out, size_t size) EXCLUDES(mu_);
  int FreeHost(void* p) EXCLUDES(mu_);
  int HostRegister(void* p, size_t size) EXCLUDES(mu_);
  int HostUnregister(void* p) EXCLUDES(mu_);
  int Memcpy(void* dst, const void* src, size_t n, int kind, void* stream, bool async)
      EXCLUDES(mu_);
  int Memset(void* p, int value, size_t n, void* stream) EXCLUDES(mu_);
  int StreamCreate(void** out) EXCLUDES(mu_);
  int StreamDestroy(void* stream) EXCLUDES(mu_);
  int StreamSynchronize(void* stream) EXCLUDES(mu_);
  int StreamWaitEvent(void* stream, void* event) EXCLUDES(mu_);
  int EventCreate(void** out, unsigned flags) EXCLUDES(mu_);
  int EventDestroy(void* event) EXCLUDES(mu_);
  int EventRecord(void* event, void* stream) EXCLUDES(mu_);
  int EventSynchronize(void* event) EXCLUDES(mu_);
  int DeviceSynchronize() EXCLUDES(mu_);
  // cudaErrorNotReady while work recorded or enqueued is not done.
  int StreamQuery(void* stream) EXCLUDES(mu_);
  int EventQuery(void* event) EXCLUDES(mu_);
  // Runs fn(data) on the stream, in order with its other work.
  int LaunchHostFunc(void* stream, void (*fn)(void*), void* data) EXCLUDES(mu_);
  // cudaPointerAttributes: the memory's type and device.
  int PointerAttributes(void* attributes, const void* p) EXCLUDES(mu_);
  size_t LockedBytes() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    size_t n = 0;
    for (const auto& [start, region] : locked_) n += region.size;
    return n;
  }
  size_t PageableAsyncCopies() const { return pageable_async_copies_.load(); }

 private:
  // Where `n` bytes at `p` are, in this library's view: the bytes to touch,
  // with the device (-1: host) and, for page-locked host memory, its
  // region's start (else null).
  struct Span {
    std::byte* bytes;
    int device;
    uintptr_t locked;
  };
  bool Resolve(const void* p, size_t n, Span* out, std::string* why) REQUIRES(mu_);
  // The allocation (its device address, itself) that holds address `a`.
  const std::pair<const uintptr_t, Allocation>* DeviceAt(uintptr_t a) const REQUIRES(mu_);
  std::map<uintptr_t, Locked>::iterator LockedAt(uintptr_t a) REQUIRES(mu_);
  // The stream `handle` names (null, 0x1, 0x2: the current device's
  // default stream); null when it names none.
  Stream* StreamOf(void* handle) REQUIRES(mu_);
  Stream* DefaultStream(int device) REQUIRES(mu_);
  Event* EventOf(void* handle) REQUIRES(mu_);
  // Both handles' objects, or cudaErrorInvalidResourceHandle for `call`.
  int Both(void* stream, void* event, const char* call, Stream** s, Event** e) REQUIRES(mu_);
  void ReleaseLocked(uintptr_t start) EXCLUDES(mu_);
  // Waits for every stream of `device`. Streams are not destroyed while a
  // call waits on them (the callers' threads take turns with their own).
  void SynchronizeDevice(int device) EXCLUDES(mu_);

  const int devices_;
  const std::chrono::microseconds delay_;
  Mutex mu_;
  std::map<uintptr_t, Allocation> allocations_ GUARDED_BY(mu_);  // by device address
  std::map<uintptr_t, Locked> locked_ GUARDED_BY(mu_);           // by host address
  std::map<Stream*, std::unique_ptr<Stream>> streams_ GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<Stream>> defaults_ GUARDED_BY(mu_);  // by device
  std::map<Event*, std::unique_ptr<Event>> events_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Event>> retired_events_ GUARDED_BY(mu_);
  std::atomic<size_t> pageable_async_copies_{0};
};

// The process's runtime: made on first use, never destroyed (the default
// streams' threads live as long as the process).
Runtime& TheRuntime() {
  static Runtime* const rt = new Runtime();
  return *rt;
}

const std::pair<const uintptr_t, Allocation>* Runtime::DeviceAt(uintptr_t a) const {
  auto it = allocations_.upper_bound(a);
  if (it == allocations_.begin()) return nullptr;
  --it;
  return a < it->first + std::max<size_t>(it->second.size, 1) ? &*it : nullptr;
}

std::map<uintptr_t, Locked>::iterator Runtime::LockedAt(uintptr_t a) {
  auto it = locked_.upper_bound(a);
  if (it == locked_.begin()) return locked_.end();
  --it;
  return a < it->first + it->second.size ? it : locked_.end();
}

bool Runtime::Resolve(const void* p, size_t n, Span* out, std::string* why) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (p == nullptr && n > 0) {
    *why = "a null address";
    return false;
  }
  if (const auto* found = DeviceAt(a)) {
    const auto& [start, alloc] = *found;
    if (a - start + n > alloc.size) {
      *why = std::to_string(n) + " bytes at " + Hex(p) + " run past the end of a " +
             std::to_string(alloc.size) + "-byte allocation on device " +
             std::to_string(alloc.device);
      return false;
    }
    *out = {alloc.bytes + (a - start), alloc.device, 0};
    return true;
  }
  if (n > 0 && DeviceAt(a + n - 1) != nullptr) {
    *why = std::to_string(n) + " host bytes at " + Hex(p) + " run into device memory";
    return false;
  }
  uintptr_t locked = 0;
  if (auto it = LockedAt(a); it != locked_.end() && a + n <= it->first + it->second.size) {
    locked = it->first;
  }
  *out = {static_cast<std::byte*>(const_cast<void*>(p)), -1, locked};
  return true;
}

Stream* Runtime::StreamOf(void* handle) {
  const auto h = reinterpret_cast<uintptr_t>(handle);
  if (h <= 2) return DefaultStream(current_device);  // legacy, cudaStreamLegacy, PerThread
  auto it = streams_.find(static_cast<Stream*>(handle));
  return it == streams_.end() ? nullptr : it->second.get();
}

Stream* Runtime::DefaultStream(int device) {
  auto& s = defaults_[device];
  if (!s) s = std::make_unique<Stream>(device, delay_);
  return s.get();
}

Event* Runtime::EventOf(void* handle) {
  auto it = events_.find(static_cast<Event*>(handle));
  return it == events_.end() ? nullptr : it->second.get();
}

int Runtime::Malloc(void** out, size_t size) {
  if (out == nullptr) return Fail(kInvalidValue, "cudaMalloc: null result pointer");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (std::max<size_t>(size, 1) + page - 1) / page * page;
  const int fd = memfd_create("strata-emulated-device", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    if (fd >= 0) close(fd);
    return Fail(kMemoryAllocation, "cudaMalloc(" + std::to_string(size) + "): memfd");
  }
  void* device = mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
  void* bytes = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (device == MAP_FAILED || bytes == MAP_FAILED) {
    if (device != MAP_FAILED) munmap(device, mapped);
    if (bytes != MAP_FAILED) munmap(bytes, mapped);
    return Fail(kMemoryAllocation, "cudaMalloc(" + std::to_string(size) + "): mmap");
  }
  MutexLock l(&mu_);
  allocations_[reinterpret_cast<uintptr_t>(device)] =
      Allocation{size, current_device, static_cast<std::byte*>(bytes), mapped};
  *out = device;
  return kSuccess;
}

int Runtime::Free(void* p) {
  if (p == nullptr) return kSuccess;
  int device = -1;
  {
    MutexLock l(&mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations_.end()) {
      return Fail(kInvalidValue, "cudaFree(" + Hex(p) + "): not an allocation's start");
    }
    device = it->second.device;
  }
  SynchronizeDevice(device);  // the runtime's cudaFree waits for the device too
  MutexLock l(&mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations_.end()) {
    return Fail(kInvalidValue, "cudaFree(" + Hex(p) + "): freed twice at once");
  }
  munmap(p, it->second.mapped);
  munmap(it->second.bytes, it->second.mapped);
  allocations_.erase(it);
  return kSuccess;
}

int Runtime::HostAlloc(void** out, size_t size) {
  if (out == nullptr) return Fail(kInvalidValue, "cudaHostAlloc: null result pointer");
  if (PageLockingRefused()) {
    return Fail(kMemoryAllocation, "cudaHostAlloc(" + std::to_string(size) + "): refused (test)");
  }
  void* p = mmap(nullptr, std::max<size_t>(size, 1), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Fail(kMemoryAllocation, "cudaHostAlloc(" + std::to_string(size) + ")");
  }
  MutexLock l(&mu_);
  locked_[reinterpret_cast<uintptr_t>(p)] = Locked{std::max<size_t>(size, 1), true};
  *out = p;
  return kSuccess;
}

int Runtime::FreeHost(void* p) {
  size_t size = 0;
  {
    MutexLock l(&mu_);
    auto it = locked_.find(reinterpret_cast<uintptr_t>(p));
    if (it == locked_.end() || !it->second.allocated) {
      return Fail(kInvalidValue, "cudaFreeHost(" + Hex(p) + "): not cudaHostAlloc's");
    }
    if (it->second.in_use > 0) {
      Fail(kInvalidValue, "cudaFreeHost(" + Hex(p) + ") while " +
                              std::to_string(it->second.in_use) + " queued copies use it");
      std::abort();
    }
    size = it->second.size;
    locked_.erase(it);
  }
  munmap(p, size);
  return kSuccess;
}

int Runtime::HostRegister(void* p, size_t size) {
  if (PageLockingRefused()) {
    return Fail(kMemoryAllocation, "cudaHostRegister(" + Hex(p) + "): refused (test)");
  }
  if (p == nullptr || size == 0) {
    return Fail(kInvalidValue, "cudaHostRegister(" + Hex(p) + ", " + std::to_string(size) + ")");
  }
  const std::string why = Unpinnable(p, size);
  if (!why.empty()) {
    return Fail(kInvalidValue,
                "cudaHostRegister(" + Hex(p) + ", " + std::to_string(size) + "): " + why);
  }
  const auto a = reinterpret_cast<uintptr_t>(p);
  MutexLock l(&mu_);
  auto after = locked_.lower_bound(a);
  const bool overlaps =
      (after != locked_.end() && after->first < a + size) || LockedAt(a) != locked_.end();
  if (overlaps) {
    return Fail(kAlreadyRegistered, "cudaHostRegister(" + Hex(p) + ", " + std::to_string(size) +
                                        "): overlaps page-locked memory");
  }
  if (DeviceAt(a) != nullptr) {
    return Fail(kInvalidValue, "cudaHostRegister(" + Hex(p) + "): device memory");
  }
  locked_[a] = Locked{size, false};
  return kSuccess;
}

int Runtime::HostUnregister(void* p) {
  MutexLock l(&mu_);
  auto it = locked_.find(reinterpret_cast<uintptr_t>(p));
  if (it == locked_.end() || it->second.allocated) {
    return Fail(kNotRegistered, "cudaHostUnregister(" + Hex(p) + "): not registered");
  }
  if (it->second.in_use > 0) {
    Fail(kInvalidValue, "cudaHostUnregister(" + Hex(p) + ") while " +
                            std::to_string(it->second.in_use) + " queued copies use it");
    std::abort();
  }
  locked_.erase(it);
  return kSuccess;
}

void Runtime::ReleaseLocked(uintptr_t start) {
  MutexLock l(&mu_);
  auto it = locked_.find(start);
  if (it != locked_.end()) --it->second.in_use;
}

int Runtime::Memcpy(void* dst, const void* src, size_t n, int kind, void* stream, bool async) {
  const char* call = async ? "cudaMemcpyAsync" : "cudaMemcpy";
  Stream* s = nullptr;
  uint64_t ticket = 0;
  bool pageable = false;
  {
    MutexLock l(&mu_);
    Span to{}, from{};
    std::string why;
    if (!Resolve(dst, n, &to, &why) || !Resolve(src, n, &from, &why)) {
      return Fail(kInvalidValue, std::string(call) + ": " + why);
    }
    // A synchronous copy runs on the default stream of the device whose
    // memory it touches (any device: unified addressing).
    const int device = to.device >= 0 ? to.device : from.device;
    s = async || device < 0 ? StreamOf(stream) : DefaultStream(device);
    if (s == nullptr) return Fail(kInvalidResourceHandle, std::string(call) + ": no such stream");
    if (kind == kDefault) {
      kind = to.device < 0 ? (from.device < 0 ? kHostToHost : kDeviceToHost)
                           : (from.device < 0 ? kHostToDevice : kDeviceToDevice);
    }
    const bool want_to = kind == kHostToDevice || kind == kDeviceToDevice;
    const bool want_from = kind == kDeviceToHost || kind == kDeviceToDevice;
    if (kind < kHostToHost || kind > kDeviceToDevice || want_to != (to.device >= 0) ||
        want_from != (from.device >= 0)) {
      return Fail(kInvalidValue, std::string(call) + ": kind " + std::to_string(kind) +
                                     " does not match " + Hex(src) + " -> " + Hex(dst));
    }
    for (const Span* d : {&to, &from}) {
      if (d->device >= 0 && d->device != s->device()) {
        return Fail(kInvalidValue, std::string(call) + ": memory of device " +
                                       std::to_string(d->device) + " on a stream of device " +
                                       std::to_string(s->device()));
      }
    }
    const Span& host = to.device < 0 ? to : from;
    pageable = (to.device < 0 || from.device < 0) && host.locked == 0;
    if (!pageable && host.locked != 0) ++locked_[host.locked].in_use;
    const uintptr_t locked = pageable ? 0 : host.locked;
    ticket = s->Enqueue([this, to = to.bytes, from = from.bytes, n, locked] {
      if (n > 0) std::memmove(to, from, n);  // an empty vector's data() may be null
      if (locked != 0) ReleaseLocked(locked);
    });
  }
  if (async && pageable) pageable_async_copies_.fetch_add(1);
  if (!async || pageable) s->Synchronize(ticket);
  return kSuccess;
}

int Runtime::Memset(void* p, int value, size_t n, void* stream) {
  MutexLock l(&mu_);
  Stream* s = StreamOf(stream);
  if (s == nullptr) return Fail(kInvalidResourceHandle, "cudaMemsetAsync: no such stream");
  Span to{};
  std::string why;
  if (!Resolve(p, n, &to, &why)) return Fail(kInvalidValue, "cudaMemsetAsync: " + why);
  if (to.device != s->device()) {
    return Fail(kInvalidValue, "cudaMemsetAsync(" + Hex(p) + "): not memory of device " +
                                   std::to_string(s->device()));
  }
  s->Enqueue([to = to.bytes, value, n] { std::memset(to, value, n); });
  return kSuccess;
}

int Runtime::StreamCreate(void** out) {
  if (out == nullptr) return Fail(kInvalidValue, "cudaStreamCreateWithFlags: null result");
  auto s = std::make_unique<Stream>(current_device, delay_);
  MutexLock l(&mu_);
  *out = s.get();
  streams_.emplace(s.get(), std::move(s));
  return kSuccess;
}

int Runtime::StreamDestroy(void* stream) {
  std::unique_ptr<Stream> s;
  {
    MutexLock l(&mu_);
    auto it = streams_.find(static_cast<Stream*>(stream));
    if (it == streams_.end()) {
      return Fail(kInvalidResourceHandle, "cudaStreamDestroy(" + Hex(stream) + ")");
    }
    s = std::move(it->second);
    streams_.erase(it);
  }
  s->Synchronize();
  return kSuccess;  // ~Stream joins its thread
}

int Runtime::StreamSynchronize(void* stream) {
  Stream* s = nullptr;
  {
    MutexLock l(&mu_);
    s = StreamOf(stream);
  }
  if (s == nullptr) return Fail(kInvalidResourceHandle, "cudaStreamSynchronize: no such stream");
  NoteSpinWait();
  s->Synchronize();
  return kSuccess;
}

int Runtime::Both(void* stream, void* event, const char* call, Stream** s, Event** e) {
  *s = StreamOf(stream);
  *e = EventOf(event);
  if (*s == nullptr || *e == nullptr) {
    return Fail(kInvalidResourceHandle, std::string(call) + ": no such stream or event");
  }
  return kSuccess;
}

int Runtime::StreamWaitEvent(void* stream, void* event) {
  MutexLock l(&mu_);
  Stream* s = nullptr;
  Event* e = nullptr;
  if (int err = Both(stream, event, "cudaStreamWaitEvent", &s, &e); err != kSuccess) return err;
  const uint64_t generation = e->recorded();
  if (generation > 0) s->Enqueue([e, generation] { e->Wait(generation); });
  return kSuccess;
}

int Runtime::EventCreate(void** out, unsigned flags) {
  if (out == nullptr) return Fail(kInvalidValue, "cudaEventCreateWithFlags: null result");
  auto e = std::make_unique<Event>(current_device, flags);
  MutexLock l(&mu_);
  *out = e.get();
  events_.emplace(e.get(), std::move(e));
  return kSuccess;
}

int Runtime::EventDestroy(void* event) {
  MutexLock l(&mu_);
  auto it = events_.find(static_cast<Event*>(event));
  if (it == events_.end()) return Fail(kInvalidResourceHandle, "cudaEventDestroy");
  // Kept: a queued cudaStreamWaitEvent may still wait on it (the runtime
  // too releases an event only once its work is done).
  retired_events_.push_back(std::move(it->second));
  events_.erase(it);
  return kSuccess;
}

int Runtime::EventRecord(void* event, void* stream) {
  MutexLock l(&mu_);
  Stream* s = nullptr;
  Event* e = nullptr;
  if (int err = Both(stream, event, "cudaEventRecord", &s, &e); err != kSuccess) return err;
  if (e->device() != s->device()) {
    return Fail(kInvalidResourceHandle,
                "cudaEventRecord: an event of device " + std::to_string(e->device()) +
                    " on a stream of device " + std::to_string(s->device()));
  }
  const uint64_t generation = e->Record();
  s->Enqueue([e, generation] { e->Complete(generation); });
  return kSuccess;
}

int Runtime::EventSynchronize(void* event) {
  Event* e = nullptr;
  {
    MutexLock l(&mu_);
    e = EventOf(event);
  }
  if (e == nullptr) return Fail(kInvalidResourceHandle, "cudaEventSynchronize");
  if ((e->flags() & kEventBlockingSync) == 0) NoteSpinWait();
  e->Wait(e->recorded());
  if (EventWaitsFail()) {
    return Fail(kLaunchFailure, "cudaEventSynchronize: a test's fault");
  }
  return kSuccess;
}

int Runtime::DeviceSynchronize() {
  NoteSpinWait();
  SynchronizeDevice(current_device);
  return kSuccess;
}

int Runtime::StreamQuery(void* stream) {
  Stream* s = nullptr;
  {
    MutexLock l(&mu_);
    s = StreamOf(stream);
  }
  if (s == nullptr) return Fail(kInvalidResourceHandle, "cudaStreamQuery: no such stream");
  return s->Idle() ? kSuccess : kNotReady;
}

int Runtime::EventQuery(void* event) {
  Event* e = nullptr;
  {
    MutexLock l(&mu_);
    e = EventOf(event);
  }
  if (e == nullptr) return Fail(kInvalidResourceHandle, "cudaEventQuery");
  return e->Done() ? kSuccess : kNotReady;
}

int Runtime::LaunchHostFunc(void* stream, void (*fn)(void*), void* data) {
  MutexLock l(&mu_);
  Stream* s = StreamOf(stream);
  if (s == nullptr) return Fail(kInvalidResourceHandle, "cudaLaunchHostFunc: no such stream");
  if (fn == nullptr) return Fail(kInvalidValue, "cudaLaunchHostFunc: no function");
  s->Enqueue([fn, data] { fn(data); });
  return kSuccess;
}

int Runtime::PointerAttributes(void* attributes, const void* p) {
  if (attributes == nullptr) return Fail(kInvalidValue, "cudaPointerGetAttributes: null result");
  // struct cudaPointerAttributes {type; device; devicePointer; hostPointer;
  // reserved[8]}: all 88 bytes written, as CUDA 13's runtime writes them, so
  // a caller that passes less memory overflows it under ASan as on a GPU.
  struct {
    int type;  // cudaMemoryType: 0 unregistered, 1 host (page-locked), 2 device
    int device;
    void* device_pointer;
    void* host_pointer;
    long reserved[8];
  } out{0, -2, nullptr, nullptr, {}};
  MutexLock l(&mu_);
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (const auto* found = DeviceAt(a)) {
    out = {2, found->second.device, const_cast<void*>(p), nullptr, {}};
  } else if (LockedAt(a) != locked_.end()) {
    out = {1, current_device, const_cast<void*>(p), const_cast<void*>(p), {}};
  }
  std::memcpy(attributes, &out, sizeof out);
  return kSuccess;
}

void Runtime::SynchronizeDevice(int device) {
  std::vector<Stream*> streams;
  {
    MutexLock l(&mu_);
    for (auto& [p, s] : streams_) {
      if (s->device() == device) streams.push_back(p);
    }
    if (auto it = defaults_.find(device); it != defaults_.end()) {
      streams.push_back(it->second.get());
    }
  }
  for (Stream* s : streams) s->Synchronize();
}

}  // namespace
}  // namespace strata::emulated_cuda

// The runtime's C ABI (engine/cuda_runtime.h's STRATA_CUDA_CALLS).
using strata::emulated_cuda::TheRuntime;

namespace {
// The runtime, for a call that works on the current device: its primary
// context is made first, as the runtime makes it.
strata::emulated_cuda::Runtime& Used() {
  strata::emulated_cuda::UseContext();
  return TheRuntime();
}
// A potentially unsafe call (emulated_cudart_capture.cc): refused while the
// capture rules forbid it, else made.
template <typename Call>
int Unsafe(const char* name, Call call) {
  const int err = strata::emulated_cuda::CaptureForbids(name);
  return err != strata::emulated_cuda::kSuccess ? err : call();
}
}  // namespace

extern "C" {

int cudaGetDeviceCount(int* count) {
  const int n = TheRuntime().devices();
  if (count != nullptr) *count = n < 0 ? 0 : n;
  if (n > 0) return 0;
  strata::emulated_cuda::last_error = strata::emulated_cuda::kNoDevice;
  return strata::emulated_cuda::kNoDevice;
}
int cudaSetDevice(int device) { return TheRuntime().SetDevice(device); }
int cudaHostAlloc(void** ptr, size_t size, unsigned) {
  return Unsafe("cudaHostAlloc", [&] { return Used().HostAlloc(ptr, size); });
}
int cudaFreeHost(void* ptr) {
  return Unsafe("cudaFreeHost", [&] { return Used().FreeHost(ptr); });
}
int cudaHostRegister(void* ptr, size_t size, unsigned) {
  return Unsafe("cudaHostRegister", [&] { return Used().HostRegister(ptr, size); });
}
int cudaHostUnregister(void* ptr) {
  return Unsafe("cudaHostUnregister", [&] { return Used().HostUnregister(ptr); });
}
int cudaMalloc(void** ptr, size_t size) {
  return Unsafe("cudaMalloc", [&] { return Used().Malloc(ptr, size); });
}
int cudaFree(void* ptr) {
  return Unsafe("cudaFree", [&] { return Used().Free(ptr); });
}
int cudaMemcpy(void* dst, const void* src, size_t size, int kind) {
  return Unsafe("cudaMemcpy", [&] { return Used().Memcpy(dst, src, size, kind, nullptr, false); });
}
int cudaMemcpyAsync(void* dst, const void* src, size_t size, int kind, void* stream) {
  return Used().Memcpy(dst, src, size, kind, stream, true);
}
int cudaMemsetAsync(void* ptr, int value, size_t size, void* stream) {
  return Used().Memset(ptr, value, size, stream);
}
int cudaStreamCreateWithFlags(void** stream, unsigned) { return Used().StreamCreate(stream); }
int cudaStreamDestroy(void* stream) { return Used().StreamDestroy(stream); }
int cudaStreamSynchronize(void* stream) {
  return Unsafe("cudaStreamSynchronize", [&] { return Used().StreamSynchronize(stream); });
}
int cudaStreamWaitEvent(void* stream, void* event, unsigned) {
  return Used().StreamWaitEvent(stream, event);
}
int cudaEventCreateWithFlags(void** event, unsigned flags) {
  return Used().EventCreate(event, flags);
}
int cudaEventDestroy(void* event) { return Used().EventDestroy(event); }
int cudaEventRecord(void* event, void* stream) { return Used().EventRecord(event, stream); }
int cudaEventSynchronize(void* event) {
  return Unsafe("cudaEventSynchronize", [&] { return Used().EventSynchronize(event); });
}
int cudaDeviceSynchronize() {
  return Unsafe("cudaDeviceSynchronize", [&] { return Used().DeviceSynchronize(); });
}

int cudaPointerGetAttributes(void* attributes, const void* ptr) {
  return Used().PointerAttributes(attributes, ptr);
}

// Calls torch makes beyond Strata's that need the runtime's state; the
// rest of torch's are in emulated_cudart_queries.cc.
int cudaStreamQuery(void* stream) {
  return Unsafe("cudaStreamQuery", [&] { return Used().StreamQuery(stream); });
}
int cudaEventQuery(void* event) {
  return Unsafe("cudaEventQuery", [&] { return Used().EventQuery(event); });
}
int cudaLaunchHostFunc(void* stream, void (*fn)(void*), void* data) {
  return Used().LaunchHostFunc(stream, fn, data);
}

// Not the runtime's: for tests, the bytes page-locked now (cudaHostAlloc's
// and cudaHostRegister's).
size_t strata_emulated_cuda_locked_bytes() { return TheRuntime().LockedBytes(); }
// Not the runtime's: cudaMemcpyAsync calls so far between a device and
// pageable host memory (synchronous for the host, and on a GPU a fraction
// of a page-locked copy's speed).
size_t strata_emulated_cuda_pageable_copies() { return TheRuntime().PageableAsyncCopies(); }
}  // extern "C"
