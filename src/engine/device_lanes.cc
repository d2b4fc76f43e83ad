// Copyright 2026 The Strata Authors.
#include "engine/device_lanes.h"

#include <optional>

namespace strata {
namespace {

std::string DeviceName(int device) { return "device " + std::to_string(device); }

}  // namespace

DeviceLanes::~DeviceLanes() {
  cuda::DeviceGuard guard(rt_);
  Sync().IgnoreError();  // a failure was the last batch's to report
  bool failed = false;
  for (auto& [device, lane] : lanes_) {
    failed |= rt_.cudaSetDevice(device) != 0;
    failed |= rt_.cudaStreamDestroy(lane.stream) != 0;
    failed |= rt_.cudaEventDestroy(lane.caller) != 0;
    failed |= rt_.cudaEventDestroy(lane.done) != 0;
    for (cuda::Event e : lane.marks) failed |= rt_.cudaEventDestroy(e) != 0;
  }
  if (failed) rt_.cudaGetLastError();  // not the caller's to see
}

Status DeviceLanes::Use(int device, std::optional<cuda::CaptureRelaxed>& relaxed) const {
  relaxed.reset();
  STRATA_RETURN_IF_ERROR(rt_.Check(rt_.cudaSetDevice(device), "cudaSetDevice", DeviceName(device)));
  relaxed.emplace(rt_);
  return Status::Ok();
}

StatusOr<cuda::Event> DeviceLanes::NewEvent(int device) const {
  cuda::Event e = nullptr;
  // Blocking: a thread that waits for one sleeps until the copies are done
  // (the default spins a core for as long, beside the trainer's threads).
  STRATA_RETURN_IF_ERROR(rt_.Check(
      rt_.cudaEventCreateWithFlags(&e, cuda::kEventBlockingSync | cuda::kEventDisableTiming),
      "cudaEventCreateWithFlags", DeviceName(device)));
  return e;
}

StatusOr<DeviceLanes::Lane*> DeviceLanes::LaneFor(int device) {
  auto it = lanes_.find(device);
  if (it != lanes_.end()) return &it->second;
  STRATA_RETURN_IF_ERROR(rt_.Check(rt_.cudaSetDevice(device), "cudaSetDevice", DeviceName(device)));
  Lane lane;
  Status s = rt_.Check(rt_.cudaStreamCreateWithFlags(&lane.stream, cuda::kStreamNonBlocking),
                       "cudaStreamCreateWithFlags", DeviceName(device));
  if (s.ok()) {
    auto e = NewEvent(device);
    s = e.status();
    if (s.ok()) lane.caller = *e;
  }
  if (s.ok()) {
    auto e = NewEvent(device);
    s = e.status();
    if (s.ok()) lane.done = *e;
  }
  if (!s.ok()) {  // what was created goes with the lane that could not be made
    if (lane.done != nullptr) rt_.cudaEventDestroy(lane.done);
    if (lane.caller != nullptr) rt_.cudaEventDestroy(lane.caller);
    if (lane.stream != nullptr) rt_.cudaStreamDestroy(lane.stream);
    return s;
  }
  return &lanes_.emplace(device, lane).first->second;
}

void DeviceLanes::Begin() {
  ordered_.clear();
  marks_.clear();
  for (auto& [device, lane] : lanes_) {
    lane.marks_used = 0;
    lane.dirty = lane.used = false;
  }
}

Status DeviceLanes::Copy(int device, void* caller, void* dst, const void* src, size_t n, int kind,
                         const std::string& what) {
  std::optional<cuda::CaptureRelaxed> relaxed;  // e.g. a restore's I/O thread
  STRATA_RETURN_IF_ERROR(Use(device, relaxed).WithContext(what));
  STRATA_ASSIGN_OR_RETURN(Lane * lane, LaneFor(device));
  if (ordered_.emplace(device, caller).second) {
    STRATA_RETURN_IF_ERROR(
        rt_.Check(rt_.cudaEventRecord(lane->caller, caller), "cudaEventRecord", what));
    STRATA_RETURN_IF_ERROR(rt_.Check(rt_.cudaStreamWaitEvent(lane->stream, lane->caller, 0),
                                     "cudaStreamWaitEvent", what));
  }
  lane->dirty = lane->used = true;
  if (n == 0) return Status::Ok();
  return rt_.Check(rt_.cudaMemcpyAsync(dst, src, n, kind, lane->stream), "cudaMemcpyAsync", what);
}

Status DeviceLanes::Record(int device, cuda::Event event) {
  auto it = lanes_.find(device);
  if (it == lanes_.end()) return InternalError("no copies on " + DeviceName(device) + " to follow");
  std::optional<cuda::CaptureRelaxed> relaxed;
  STRATA_RETURN_IF_ERROR(Use(device, relaxed));
  return rt_.Check(rt_.cudaEventRecord(event, it->second.stream), "cudaEventRecord",
                   DeviceName(device));
}

StatusOr<bool> DeviceLanes::PageLocked(int device, const void* p) const {
  std::optional<cuda::CaptureRelaxed> relaxed;
  STRATA_RETURN_IF_ERROR(Use(device, relaxed));
  cuda::PointerAttributes attributes;
  STRATA_RETURN_IF_ERROR(rt_.Check(rt_.cudaPointerGetAttributes(&attributes, p),
                                   "cudaPointerGetAttributes", "host memory to copy from"));
  return attributes.type == cuda::kMemoryTypeHost;
}

StatusOr<cuda::Event> DeviceLanes::EventOn(int device) const {
  std::optional<cuda::CaptureRelaxed> relaxed;
  STRATA_RETURN_IF_ERROR(Use(device, relaxed));
  return NewEvent(device);
}

StatusOr<int> DeviceLanes::Mark() {
  std::optional<cuda::CaptureRelaxed> relaxed;
  std::vector<std::pair<int, cuda::Event>> mark;
  for (auto& [device, lane] : lanes_) {
    if (!lane.dirty) continue;
    // First: an event is made on the current device, and is recorded only
    // on a stream of its own device.
    STRATA_RETURN_IF_ERROR(Use(device, relaxed));
    if (lane.marks_used == lane.marks.size()) {
      STRATA_ASSIGN_OR_RETURN(cuda::Event e, NewEvent(device));
      lane.marks.push_back(e);
    }
    cuda::Event e = lane.marks[lane.marks_used++];
    STRATA_RETURN_IF_ERROR(
        rt_.Check(rt_.cudaEventRecord(e, lane.stream), "cudaEventRecord", DeviceName(device)));
    lane.dirty = false;
    mark.emplace_back(device, e);
  }
  if (mark.empty()) return -1;
  marks_.push_back(std::move(mark));
  return static_cast<int>(marks_.size()) - 1;
}

Status DeviceLanes::WaitMark(int m) const {
  if (m < 0) return Status::Ok();
  // Every device's copies are waited for, even after an error: a caller
  // that gives the memory back on an error must find nothing writing it.
  Status first;
  for (const auto& [device, event] : marks_[static_cast<size_t>(m)]) {
    // The calling thread (a checksum thread) works on the event's device:
    // no context of device 0 is made for it.
    std::optional<cuda::CaptureRelaxed> relaxed;
    Status s = Use(device, relaxed);
    if (s.ok()) {
      s = rt_.Check(rt_.cudaEventSynchronize(event), "cudaEventSynchronize",
                    "copies on " + DeviceName(device));
    }
    if (first.ok()) first = s;
  }
  return first;
}

Status DeviceLanes::Finish() {
  std::optional<cuda::CaptureRelaxed> relaxed;
  for (auto& [device, lane] : lanes_) {
    if (!lane.used) continue;
    STRATA_RETURN_IF_ERROR(Use(device, relaxed));
    STRATA_RETURN_IF_ERROR(rt_.Check(rt_.cudaEventRecord(lane.done, lane.stream), "cudaEventRecord",
                                     DeviceName(device)));
    lane.pending = pending_ = true;
  }
  return Status::Ok();
}

Status DeviceLanes::WaitDone() {
  if (!pending_) return Status::Ok();
  cuda::DeviceGuard guard(rt_);
  Status first;
  std::optional<cuda::CaptureRelaxed> relaxed;
  for (auto& [device, lane] : lanes_) {
    if (!lane.pending) continue;
    Status s = Use(device, relaxed);
    if (s.ok()) {
      s = rt_.Check(rt_.cudaEventSynchronize(lane.done), "cudaEventSynchronize",
                    "copies on " + DeviceName(device));
    }
    if (first.ok()) first = s;
    lane.pending = false;
  }
  pending_ = false;
  return first;
}

Status DeviceLanes::OrderAfter(void* stream, int device) {
  auto it = lanes_.find(device);
  if (!pending_ || it == lanes_.end() || !it->second.pending) return Status::Ok();
  cuda::DeviceGuard guard(rt_);
  std::optional<cuda::CaptureRelaxed> relaxed;
  STRATA_RETURN_IF_ERROR(Use(device, relaxed));
  return rt_.Check(rt_.cudaStreamWaitEvent(stream, it->second.done, 0), "cudaStreamWaitEvent",
                   DeviceName(device));
}

Status DeviceLanes::OrderCallers() {
  for (const auto& [device, stream] : ordered_) STRATA_RETURN_IF_ERROR(OrderAfter(stream, device));
  return Status::Ok();
}

Status DeviceLanes::Sync() {
  cuda::DeviceGuard guard(rt_);
  Status first;
  std::optional<cuda::CaptureRelaxed> relaxed;
  for (auto& [device, lane] : lanes_) {
    // `done` recorded again and waited for, not the stream synchronized:
    // the event's wait sleeps. (A stream that waited on the last record
    // keeps waiting on that one.)
    Status s = Use(device, relaxed);
    if (s.ok()) {
      s = rt_.Check(rt_.cudaEventRecord(lane.done, lane.stream), "cudaEventRecord",
                    DeviceName(device));
    }
    if (s.ok()) {
      s = rt_.Check(rt_.cudaEventSynchronize(lane.done), "cudaEventSynchronize",
                    "copies on " + DeviceName(device));
    }
    if (first.ok()) first = s;
    lane.pending = false;
  }
  pending_ = false;
  return first;
}

}  // namespace strata
