// Copyright 2026 The Strata Authors.
//
// CudaStager: a trainer's state -- CUDA buffers and host buffers alike --
// saved and restored through a Checkpointer with one copy each way. A save
// copies each buffer straight into the step's own data files on the RAM
// disk, mapped into the process and page-locked once (device->host copies
// land in the pages the RAM tier keeps: the state is in host memory once,
// and committing it checksums those pages in place, while later buffers
// are still being copied). A restore reads and verifies into host memory
// and copies each chunk to its buffer as soon as it verifies, on the thread
// that verified it; from memory nobody page-locked (the step files after a
// restart) through a few page-locked chunks of the stager's, so the copies
// still run at the page-locked speed. strata.torch and strata.dcp save and
// restore through it too.
//
//   auto ckpt = strata::Checkpointer::Open("/local", options);
//   auto stager = strata::CudaStager::Open(ckpt->get());  // UNAVAILABLE: no CUDA
//   ...
//   (*stager)->RestoreInto(device_buffers);                // or start fresh
//   (*stager)->Reserve(device_buffers_as_items);           // memory set up ahead
//   for (step = first; step <= last; ++step) {
//     Forward(); Backward();
//     (*stager)->OrderAfterStaging(stream, device);        // before the update
//     OptimizerStep(stream);
//     if (ckpt->ShouldSave(step))
//       (*stager)->Save(step, device_buffers, DeviceSaveMode::kOverlapped);
//   }
//
// The CUDA runtime is loaded at run time (dlopen of libcudart), so libstrata
// neither links nor needs CUDA; without it Open() is UNAVAILABLE (or, with
// allow_host_only, a stager of host buffers) and nothing else changes. A runtime a framework
// already loaded as a shared library is preferred; a trainer that links cudart statically (nvcc's
// default) and the stager's shared runtime share the device through the driver: device pointers and
// streams are valid in both.
//
// Copies run on a non-blocking stream of the stager's own per device, ordered
// after the stream each item names (an event recorded there), so a copy sees
// every kernel enqueued before Save() that writes the buffer, and a restored
// buffer is ordered before every kernel enqueued on its stream after
// RestoreInto() returns.
//
// Host memory: a state of S bytes with k steps kept holds at most (k + 1) * S
// (the steps, and at most one set of step files prepared for the next
// save), and while a restore runs, at most 16 page-locked chunks of 4 MiB
// per device it copies to; see docs/python.md, "Host memory".
//
// In place only in memory: step files on a filesystem that writes pages back
// to a disk are not page-locked (the kernel does not see a device's writes
// to page-locked file pages, so a step could be synced without them). With
// CUDA, saves to such a directory copy into a page-locked staging block of
// S bytes that the engine writes the files from (status().in_place false).
//
// Thread safety: one thread drives a stager and its Checkpointer (as for the
// Checkpointer alone); status() from any thread. The Checkpointer must
// outlive the stager.
#ifndef STRATA_CUDA_H_
#define STRATA_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
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
  // An overlapped save may still copy this buffer after Save() returns
  // (the caller orders its next change after the copy: OrderAfterStaging).
  // false: copied before Save() returns in either mode (a buffer the next
  // forward pass changes, such as a norm's running statistics).
  bool deferrable = true;
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
  // memory from the start, without a warning, and restores copy to the
  // devices from pageable memory (not through page-locked chunks).
  bool pin = true;
  // Without a CUDA runtime or device, Open() is UNAVAILABLE (false) or
  // returns a stager of host buffers (true; a device item is then
  // INVALID_ARGUMENT): one path for trainers with and without a GPU.
  bool allow_host_only = false;
  // After a restore, prepare the memory for saving the restored state in
  // the background (as Reserve() with the restored items), so the first
  // save of the restarted job sets nothing up.
  bool reserve_after_restore = true;
};

// What the stager holds, for status displays and metrics.
struct CudaStagerStatus {
  // Host memory held for staging: the step files kept mapped (one prepared
  // for the next save, and the committed ones retention will recycle), or
  // without in-place saves, the staging block.
  uint64_t staging_bytes = 0;
  bool staging_pinned = false;    // all of it page-locked
  bool copies_in_flight = false;  // a save's copies not yet waited for (an overlapped
                                  // save's after it returned; a blocking one's inside it)
  bool reserving = false;         // memory for the next save is being prepared
  bool in_place = false;          // saves copy into the step's files (else into staging)
  int devices = 0;                // CUDA devices seen (0: host buffers only)
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

  // Copies every item into the step's files (one device->host copy per
  // device item, on the lane of its device; host items by memcpy, before
  // Save() returns in either mode) and saves them as `step` through the
  // checkpointer, which checksums them in place -- in the background for an
  // async checkpointer, starting on the first items while later ones are
  // still copied -- and commits. The layout of the files is worked out once
  // and reused while the items keep their names, dtypes, shapes and sizes.
  // Waits first for the previous save. An error of the checkpointer (the
  // previous save's failure, invalid items) is returned as Save() returns
  // it; a CUDA error is INTERNAL naming the call and item. On-demand saves
  // (a notice is pending) commit before returning in either mode, as with
  // Checkpointer::Save. Where the checkpointer cannot save in place, the
  // items are copied into page-locked staging memory the engine writes
  // from.
  //
  // `gate`, if set, is called once on the thread that commits, after every
  // item was copied and checksummed and before the step is committed: an
  // error fails the save (nothing is committed; the next Save() or the
  // checkpointer's Wait() returns it). For a caller that can tell only then
  // whether a buffer changed under its copy.
  virtual StatusOr<SaveResult> Save(int64_t step, std::span<const DeviceItem> items,
                                    DeviceSaveMode mode = DeviceSaveMode::kBlocking,
                                    std::function<Status()> gate = nullptr) = 0;

  // Returns once the copies of the last overlapped save are done (OK at once
  // when none are in flight).
  virtual Status WaitStaged() = 0;

  // Prepares, in the background, the host memory a save of these items
  // needs (their names, dtypes, shapes and sizes; the data is not read): the
  // step files, mapped and page-locked (or the staging block, where saves
  // are not in place). The next Save() of the same items
  // then sets nothing up; one that comes before the memory is ready waits
  // for it (it would set up the same). Returns at once: status() shows
  // `reserving`; a failure is logged and that Save() sets up its own.
  virtual Status Reserve(std::span<const DeviceItem> items) = 0;

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

  // A restore whose destinations are known only once part of the step is
  // read: a state tree saved as one item of the step (`key`) says where
  // every other item goes. `key` is read and verified first (unless
  // options.first_item names another item); as soon as it is, `plan` is
  // called (from a reading thread, while the others read on) with the step
  // being read and that item;
  // it returns the destination of each item that has one (by name; the
  // others stay in host memory only). From then on every planned item is
  // copied to its destination as soon as it is verified, and those verified
  // before are copied at once. A mismatch between a destination and its
  // item (size, a name the step lacks) is INVALID_ARGUMENT; an error `plan`
  // returns fails the restore as it is (no older step is tried). When the
  // step has no item `key`, `plan` is not called and nothing is copied.
  // Returns the step read (every item in host memory, valid until the next
  // restore or save through this stager), with every planned item also in
  // its destination; on a fallback to an older step, `plan` is called again
  // for it and its bytes overwrite what was copied.
  using RestorePlan = std::function<StatusOr<std::vector<MutableDeviceItem>>(
      const RestoredStep& reading, const RestoredItem& key)>;
  virtual StatusOr<RestoredStep> RestorePlanned(const std::string& key, const RestorePlan& plan,
                                                const RestoreOptions& options = {}) = 0;

  virtual CudaStagerStatus status() const = 0;
};

// Copies each item's bytes to `dst[i]` (host memory; page-locked for full
// speed): host items by memcpy, device items on a stream per device ordered
// after the stream each names. Returns when every copy is done. For a
// snapshot of a state the caller reads itself (DCP's stager,
// strata.torch.stage_state_dict); `deferrable` is ignored. Device items
// take the CUDA runtime (loaded once per process). Thread-safe (callers
// take turns).
Status CopyToHost(std::span<const DeviceItem> items, std::span<std::byte* const> dst);

// Page-locks `n` bytes of host memory at `p` for every device
// (cudaHostRegister, portable) with the process's CUDA runtime, as the
// calling thread's current device sees it; UNAVAILABLE without a runtime
// that sees a device, INTERNAL naming the call when the runtime refuses.
// Exactly the pages asked for, released by PageUnlock(): for memory a
// caller owns (strata.torch.stage_state_dict's arena). A refusal is not
// left as the thread's last CUDA error.
Status PageLock(void* p, size_t n);
void PageUnlock(void* p);

// CudaStager::RestorePlanned of `dir/<step>`, read without a Checkpointer
// (no lock, no fallback), as RestoreStep: for steps another component
// manages, such as the node agent's directory or another rank's. On a
// tmpfs (the RAM disk) the step is verified and copied where its files
// are, through a read-only mapping the returned step owns, not read into
// other memory first; elsewhere it is read. Device destinations take the
// CUDA runtime (loaded once per process; without it, a device destination
// is INVALID_ARGUMENT). `threads` 0 = one per CPU.
StatusOr<RestoredStep> RestoreStepPlanned(const std::string& dir, int64_t step,
                                          const std::string& key,
                                          const CudaStager::RestorePlan& plan, int threads = 0);

}  // namespace strata

#endif  // STRATA_CUDA_H_
