// Copyright 2026 The Strata Authors.
//
// CudaStager: a C++ trainer's CUDA buffers saved and restored through a
// Checkpointer with one copy each way, device <-> page-locked host memory
// that the engine writes from and reads into (never a second host copy).
//
//   auto ckpt = strata::Checkpointer::Open("/local", options);
//   auto stager = strata::CudaStager::Open(ckpt->get());  // UNAVAILABLE: no CUDA
//   ...
//   (*stager)->RestoreInto(device_buffers);                // or start fresh
//   for (step = first; step <= last; ++step) {
//     Forward(); Backward();
//     (*stager)->OrderAfterStaging(stream, device);        // before the update
//     OptimizerStep(stream);
//     if (ckpt->ShouldSave(step))
//       (*stager)->Save(step, device_buffers, DeviceSaveMode::kOverlapped);
//   }
//
// The CUDA runtime is loaded at run time (dlopen of libcudart), so libstrata
// neither links nor needs CUDA; without it Open() is UNAVAILABLE and nothing
// else changes. A runtime a framework already loaded as a shared library is
// preferred; a trainer that links cudart statically (nvcc's default) and the
// stager's shared runtime share the device through the driver: device
// pointers and streams are valid in both.
//
// Copies run on a non-blocking stream of the stager's own per device, ordered
// after the stream each item names (an event recorded there), so a copy sees
// every kernel enqueued before Save() that writes the buffer, and a restored
// buffer is ordered before every kernel enqueued on its stream after
// RestoreInto() returns.
//
// Thread safety: one thread drives a stager and its Checkpointer (as for the
// Checkpointer alone). The Checkpointer must outlive the stager.
#ifndef STRATA_CUDA_H_
#define STRATA_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/checkpointer.h"
#include "strata/status.h"
#include "strata/types.h"

namespace strata {

// A buffer to save: as Item, plus where it lives.
struct DeviceItem {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size = 0;  // bytes
  // The CUDA device ordinal holding `data`; -1: host memory (copied into the
  // staging memory by Save() itself, before it returns).
  int device = -1;
  // The cudaStream_t whose work the copy must follow (the stream that last
  // wrote `data`); nullptr: the device's legacy default stream.
  void* stream = nullptr;
};

// A buffer to restore into: as MutableItem, plus where it lives.
struct MutableDeviceItem {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t size = 0;
  int device = -1;  // -1: host memory
  // The cudaStream_t that will use the restored bytes: the copy into `data`
  // follows the work enqueued there before RestoreInto(), and the work
  // enqueued after it follows the copy. nullptr: the legacy default stream.
  void* stream = nullptr;
};

enum class DeviceSaveMode {
  // Save() returns when every device->host copy is done: the buffers may be
  // changed at once.
  kBlocking,
  // Save() returns once the copies are enqueued. The caller must not change a
  // saved buffer until the copies are done: WaitStaged() (the host waits), or
  // OrderAfterStaging() on the stream that will write it (the device waits,
  // the host does not). The forward and backward passes, which only read the
  // parameters, run meanwhile.
  kOverlapped,
};

struct CudaStagerOptions {
  // The CUDA runtime library: "" = $STRATA_CUDART, else libcudart.so, .so.13,
  // .so.12, .so.11.0, the first that loads.
  std::string runtime_library;
  // Page-lock the staging memory (cudaHostAlloc). When it cannot be pinned
  // it is ordinary memory: saves and restores still work, the copies are
  // slower and synchronous, and a warning says so once. false: ordinary
  // memory from the start, without a warning.
  bool pin = true;
};

// What the stager holds, for status displays and metrics.
struct CudaStagerStatus {
  uint64_t staging_bytes = 0;  // host memory held (the largest state saved or restored)
  bool staging_pinned = false;
  bool copies_in_flight = false;  // an overlapped save's copies not yet waited for
};

class CudaStager {
 public:
  // UNAVAILABLE when the runtime cannot be loaded or sees no device (naming
  // the libraries tried or the runtime's answer). `ckpt` is not owned and must
  // outlive the stager.
  static StatusOr<std::unique_ptr<CudaStager>> Open(Checkpointer* ckpt,
                                                    const CudaStagerOptions& options = {});

  // Waits for copies in flight and for the checkpointer's save that reads the
  // staging memory, then frees that memory.
  virtual ~CudaStager() = default;

  // Copies every item into the staging memory (one device->host copy per
  // device item; host items by memcpy) and saves them as `step` through the
  // checkpointer, which reads that memory without copying it again. Waits
  // first for the previous save (the staging memory is reused). An error of
  // the checkpointer (the previous save's failure, invalid items) is returned
  // as Save() returns it; a CUDA error is INTERNAL naming the call and item.
  // On-demand saves (a notice is pending) commit before returning in either
  // mode, as with Checkpointer::Save.
  virtual StatusOr<SaveResult> Save(int64_t step, std::span<const DeviceItem> items,
                                    DeviceSaveMode mode = DeviceSaveMode::kBlocking) = 0;

  // Returns once the copies of the last overlapped save are done (OK at once
  // when none are in flight).
  virtual Status WaitStaged() = 0;

  // Makes `stream` (a cudaStream_t of `device`; nullptr: its legacy default
  // stream) wait, on the device, for the last save's copies from that device:
  // work enqueued there afterwards, such as the optimizer's update, cannot
  // change a buffer before its copy has read it. The host does not wait.
  virtual Status OrderAfterStaging(void* stream, int device) = 0;

  // Restores the newest step that verifies (or options.step, as
  // Checkpointer::RestoreInto) into the buffers: the engine reads and
  // verifies into the staging memory, and each item's host->device copy is
  // enqueued as soon as that item is verified, while the rest is still read.
  // Every item of the step must have a buffer of the same name, dtype, shape
  // and size and every buffer an item; a mismatch is INVALID_ARGUMENT naming
  // the item (it is not corruption: no older step is restored instead), and
  // the step is matched before any of its bytes is copied. If the engine
  // falls back to an older step, that step's bytes overwrite what was copied.
  // Returns with every copy done. On another error, or when the newest step
  // matched, failed verification after some copies and an older one does not
  // match, the buffers may hold parts of a step. options.item_verified is
  // called as for Checkpointer::RestoreToMemory: the memory it sees is the
  // stager's, valid during the call only.
  virtual StatusOr<int64_t> RestoreInto(std::span<const MutableDeviceItem> into,
                                        const RestoreOptions& options = {}) = 0;

  virtual CudaStagerStatus status() const = 0;
};

}  // namespace strata

#endif  // STRATA_CUDA_H_
