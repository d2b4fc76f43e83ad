// Copyright 2026 The Strata Authors.
//
// DeviceLanes: the CUDA side of staging. Per device, a lane: a non-blocking
// stream of Strata's own that copies run on, ordered after the caller's
// streams (an event recorded there, waited on by the lane), and events
// recorded on the lane after the copies:
//
//   * marks, recorded every few hundred MiB of a batch of copies, so that a
//     reader (the checksums of a save) can start on the first items while
//     later ones are still copied: WaitMark(m) returns once every copy
//     enqueued before mark m is done;
//   * `done`, recorded after a whole batch, which the host (WaitDone) or a
//     caller's stream (OrderAfter) waits on.
//
// One thread drives a batch (Begin, Copy, Mark, Finish); WaitMark may be
// called from any thread while the batch's events are not re-recorded (the
// next Begin), as the runtime is thread-safe.
#ifndef STRATA_ENGINE_DEVICE_LANES_H_
#define STRATA_ENGINE_DEVICE_LANES_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda_runtime.h"
#include "strata/status.h"

namespace strata {

class DeviceLanes {
 public:
  explicit DeviceLanes(const cuda::Runtime& rt) : rt_(rt) {}
  // Destroys the streams and events (after waiting for the streams).
  ~DeviceLanes();
  DeviceLanes(const DeviceLanes&) = delete;
  DeviceLanes& operator=(const DeviceLanes&) = delete;

  // Starts a batch: forgets the last batch's marks and caller orderings.
  // REQUIRES: nothing reads the last batch's marks any more.
  void Begin();
  // Enqueues a copy of `n` bytes on `device`'s lane (`kind` a
  // cuda::kMemcpy* constant), after the work enqueued on `caller` (a
  // cudaStream_t of `device`; nullptr: its legacy default stream) before
  // this call. `what` names the item in errors.
  Status Copy(int device, void* caller, void* dst, const void* src, size_t n, int kind,
              const std::string& what);
  // Records `event` (made on `device`) on `device`'s lane, after the copies
  // enqueued there so far. REQUIRES: a Copy on `device` in this batch.
  Status Record(int device, cuda::Event event);
  // Records a mark on every lane that copied since the last mark; returns
  // its index (-1: nothing was copied since, nothing to wait for).
  StatusOr<int> Mark();
  // Waits on the host until every copy before mark `m` is done (OK at once
  // for -1). Thread-safe; sets the calling thread's device to the lane's.
  Status WaitMark(int m) const;
  // Records `done` on every lane this batch used.
  Status Finish();
  // Waits on the host for the batch's copies (its `done` events); OK at once
  // when none are pending.
  Status WaitDone();
  // Makes `stream` of `device` wait, on the device, for the batch's copies
  // from that device (nothing when none are pending there).
  Status OrderAfter(void* stream, int device);
  // Makes each caller stream the batch ordered after wait for its device's
  // copies: work enqueued there later follows them.
  Status OrderCallers();
  // Waits on the host for every lane's stream; nothing of ours reads or
  // writes host memory afterwards.
  Status Sync();
  // Every host wait here sleeps (blocking-sync events), and every call is
  // made in the relaxed stream capture mode (cuda::CaptureRelaxed), on
  // whatever thread makes it.
  bool pending() const { return pending_; }

  // Whether host memory `p` is page-locked (copies from it run at full
  // speed and do not hold the host), asked on `device` (made the calling
  // thread's). Thread-safe.
  StatusOr<bool> PageLocked(int device, const void* p) const;
  // Makes `device` the calling thread's and a fresh event there
  // (blocking-sync, no timing). Thread-safe.
  StatusOr<cuda::Event> EventOn(int device) const;
  // Makes `device` the calling thread's, then its calls relaxed (`relaxed`
  // replaced): the capture mode is set only once the thread is on the
  // device, so a runtime that makes a context for the call makes it there.
  Status Use(int device, std::optional<cuda::CaptureRelaxed>& relaxed) const;
  const cuda::Runtime& runtime() const { return rt_; }

 private:
  struct Lane {
    cuda::Stream stream = nullptr;
    cuda::Event caller = nullptr;    // recorded on a caller's stream, waited on by ours
    cuda::Event done = nullptr;      // recorded on ours after a batch
    std::vector<cuda::Event> marks;  // events for marks, reused across batches
    size_t marks_used = 0;
    bool dirty = false;    // copied since the last mark
    bool used = false;     // copied in this batch
    bool pending = false;  // `done` recorded, not yet waited for by the host
  };
  StatusOr<Lane*> LaneFor(int device);
  StatusOr<cuda::Event> NewEvent(int device) const;

  const cuda::Runtime& rt_;
  std::map<int, Lane> lanes_;                // by device
  std::set<std::pair<int, void*>> ordered_;  // (device, caller stream) of this batch
  std::vector<std::vector<std::pair<int, cuda::Event>>> marks_;  // per mark: (device, event)
  bool pending_ = false;
};

}  // namespace strata

#endif  // STRATA_ENGINE_DEVICE_LANES_H_
