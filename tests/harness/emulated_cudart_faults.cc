// Copyright 2026 The Strata Authors.
//
// The faults a test sets in the emulated CUDA runtime (emulated_cudart.cc),
// through C calls that are not the runtime's, so that it can check what a
// path does when the runtime refuses or fails:
//  * strata_emulated_cuda_refuse_page_locking(): cudaHostAlloc and
//    cudaHostRegister fail with cudaErrorMemoryAllocation, as a process
//    past its RLIMIT_MEMLOCK sees;
//  * strata_emulated_cuda_fail_event_waits(): cudaEventSynchronize waits
//    as ever, then returns cudaErrorLaunchFailure, as a host wait does
//    after a device fault in the work it waited for (a copy that fails
//    after it was enqueued); strata_emulated_cuda_fail_event_waits_here():
//    the same for the calling thread's waits only, the work having
//    completed for every other thread (a wait that fails after the step
//    its copies fed was committed).
#include <atomic>

#include "emulated_cudart.h"

namespace strata::emulated_cuda {
namespace {
std::atomic<bool> refuse_page_locking{false};
std::atomic<bool> fail_event_waits{false};
STRATA_EMU_TLS thread_local bool fail_event_waits_here = false;
}  // namespace

bool PageLockingRefused() { return refuse_page_locking.load(); }
bool EventWaitsFail() { return fail_event_waits.load() || fail_event_waits_here; }

}  // namespace strata::emulated_cuda

extern "C" {

void strata_emulated_cuda_refuse_page_locking(bool refuse) {
  strata::emulated_cuda::refuse_page_locking.store(refuse);
}
void strata_emulated_cuda_fail_event_waits(bool fail) {
  strata::emulated_cuda::fail_event_waits.store(fail);
}
void strata_emulated_cuda_fail_event_waits_here(bool fail) {
  strata::emulated_cuda::fail_event_waits_here = fail;
}

}  // extern "C"
