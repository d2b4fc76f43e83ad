// Copyright 2026 The Strata Authors.
//
// What the emulated CUDA runtime's files share (emulated_cudart.cc: the
// runtime and Strata's calls; emulated_cudart_queries.cc: the calls torch
// makes besides; emulated_cudart_capture.cc: stream capture's rules and
// host waits; emulated_cudart_faults.cc: the faults a test sets): the runtime's error codes, the
// calling thread's error and device, its primary contexts, and the C ABI calls one file answers
// with the other's. The streams and events are in emulated_cudart_queues.h.
#ifndef STRATA_TESTS_HARNESS_EMULATED_CUDART_H_
#define STRATA_TESTS_HARNESS_EMULATED_CUDART_H_

#include <cstddef>
#include <string>

// The runtime's per-thread state lives in the static TLS block (initial-exec)
// rather than in a dlopen'd library's dynamic TLS: ThreadSanitizer's
// handling of __tls_get_addr for a dynamic block can compute a bogus range
// and abort ("failed to allocate ... bytes") once enough threads have used
// the library. The few bytes fit the surplus glibc keeps for dlopen.
#define STRATA_EMU_TLS __attribute__((tls_model("initial-exec")))

namespace strata::emulated_cuda {

// The runtime's codes (cudaError_t).
inline constexpr int kSuccess = 0;
inline constexpr int kInvalidValue = 1;
inline constexpr int kMemoryAllocation = 2;
inline constexpr int kNoDevice = 100;
inline constexpr int kInvalidDevice = 101;
inline constexpr int kInvalidResourceHandle = 400;
inline constexpr int kNotReady = 600;
inline constexpr int kLaunchFailure = 719;
inline constexpr int kAlreadyRegistered = 712;
inline constexpr int kNotRegistered = 713;
inline constexpr int kNotSupported = 801;
inline constexpr int kStreamCaptureUnsupported = 900;
inline constexpr int kStreamCaptureInvalidated = 901;

// Per thread, as the runtime keeps them: the current device, and the error
// cudaGetLastError returns (and clears).
extern STRATA_EMU_TLS thread_local int current_device;
extern STRATA_EMU_TLS thread_local int last_error;

// Records `code` as the calling thread's error, prints `why` to stderr,
// returns `code`.
int Fail(int code, const std::string& why);

// Primary contexts, as the runtime makes them: every call that works on a
// device makes the calling thread's current device's context (and makes it
// the thread's current context), cudaSetDevice included since CUDA 12; the
// calls that only ask (device count and properties, versions, errors,
// cudaGetDevice) make none. A context, once made, stays for the process.
void UseContext();
// Whether `device`'s primary context was made.
bool ContextMade(int device);
// Whether the calling thread has a current context.
extern STRATA_EMU_TLS thread_local bool context_current;

// Why the runtime could not page-lock [p, p + size) of host memory
// (emulated_cudart_queries.cc): it pins every page for writing
// (get_user_pages), so a range with a page not mapped, or not readable and
// writable (a gap in a reservation, a read-only mapping), is refused. Empty
// when it could.
std::string Unpinnable(const void* p, size_t size);

// Stream capture and host waits (emulated_cudart_capture.cc). kSuccess, or
// cudaErrorStreamCaptureUnsupported (recorded as Fail does) when the calling
// thread may not make the potentially unsafe `call` now: a test's capture
// in the global mode is under way on another thread, and this thread's
// capture mode is not relaxed. The capture is then invalidated.
int CaptureForbids(const char* call);
// Counts a host wait that spins a core on a device (a stream's or device's
// synchronize, an event's without cudaEventBlockingSync).
void NoteSpinWait();
// cudaEventBlockingSync.
inline constexpr unsigned kEventBlockingSync = 0x01;

// The faults a test sets (emulated_cudart_faults.cc): whether page-locking
// is refused now, and whether the calling thread's event waits fail.
bool PageLockingRefused();
bool EventWaitsFail();

}  // namespace strata::emulated_cuda

extern "C" {
int cudaGetDeviceCount(int* count);
int cudaHostAlloc(void** ptr, size_t size, unsigned flags);
int cudaStreamCreateWithFlags(void** stream, unsigned flags);
int cudaEventCreateWithFlags(void** event, unsigned flags);
int cudaEventRecord(void* event, void* stream);
const char* cudaGetErrorString(int error);
const char* cudaGetErrorName(int error);
}

#endif  // STRATA_TESTS_HARNESS_EMULATED_CUDART_H_
