// Copyright 2026 The Strata Authors.
//
// The emulated runtime's stream capture rules and host waits, for tests
// (emulated_cudart.h). Graphs are not emulated: a test stands for a thread
// that captures one (strata_emulated_cuda_begin_capture), and the runtime
// then applies the rules of cudaThreadExchangeStreamCaptureMode to every
// other thread: one in the global mode (every thread's default) may not
// make a potentially unsafe call; the call fails and the capture is
// invalidated (its end reports cudaErrorStreamCaptureInvalidated). Which
// calls are unsafe the runtime does not list; here they are the calls that
// allocate, free or page-lock memory and the host waits (the runtime's own
// example is cudaMalloc), which may be stricter than a device.
#include <atomic>
#include <cstdint>
#include <string>

#include "emulated_cudart.h"

namespace strata::emulated_cuda {
namespace {

constexpr int kCaptureGlobal = 0;
constexpr int kCaptureRelaxed = 2;

STRATA_EMU_TLS thread_local int capture_mode = kCaptureGlobal;
STRATA_EMU_TLS thread_local bool capturing = false;  // this thread began the test's capture
std::atomic<int> global_captures{0};
std::atomic<bool> invalidated{false};
std::atomic<uint64_t> spin_waits{0};

}  // namespace

int CaptureForbids(const char* call) {
  if (global_captures.load() == 0 || capturing || capture_mode == kCaptureRelaxed) {
    return kSuccess;
  }
  invalidated = true;
  return Fail(kStreamCaptureUnsupported,
              std::string(call) +
                  ": another thread captures a graph in the global mode, and this thread's "
                  "capture mode is not relaxed");
}

void NoteSpinWait() { ++spin_waits; }

}  // namespace strata::emulated_cuda

using strata::emulated_cuda::capture_mode;

extern "C" {

// Makes the current device's context, as most runtime calls do (the
// runtime does not say this one makes none): a caller must be on the
// device it works on first.
int cudaThreadExchangeStreamCaptureMode(int* mode) {
  strata::emulated_cuda::UseContext();
  if (mode == nullptr || *mode < 0 || *mode > strata::emulated_cuda::kCaptureRelaxed) {
    return strata::emulated_cuda::Fail(strata::emulated_cuda::kInvalidValue,
                                       "cudaThreadExchangeStreamCaptureMode: no such mode");
  }
  const int previous = capture_mode;
  capture_mode = *mode;
  *mode = previous;
  return 0;
}

// Not the runtime's: for tests. The calling thread begins a capture in the
// global mode (it may make any call meanwhile), and ends it: 0, or
// cudaErrorStreamCaptureInvalidated when another thread broke its rules.
void strata_emulated_cuda_begin_capture() {
  strata::emulated_cuda::capturing = true;
  strata::emulated_cuda::invalidated = false;
  ++strata::emulated_cuda::global_captures;
}
int strata_emulated_cuda_end_capture() {
  strata::emulated_cuda::capturing = false;
  --strata::emulated_cuda::global_captures;
  return strata::emulated_cuda::invalidated.exchange(false)
             ? strata::emulated_cuda::kStreamCaptureInvalidated
             : 0;
}

// Not the runtime's: for tests. Host waits so far that spin a core on a
// device (a stream's or device's synchronize, an event's without
// cudaEventBlockingSync).
uint64_t strata_emulated_cuda_spin_waits() { return strata::emulated_cuda::spin_waits.load(); }

}  // extern "C"
