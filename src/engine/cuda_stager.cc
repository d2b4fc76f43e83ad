// Copyright 2026 The Strata Authors.
//
// CudaStager (include/strata/cuda.h). One block of host memory, page-locked
// with cudaHostAlloc (portable: every device copies into it at full speed),
// holds the state laid out as the engine lays out a restored step (items at
// 64-byte aligned offsets). A save copies each device buffer into it once and
// hands it to the Checkpointer borrowed; a restore lends it to the engine as
// the memory to read into and copies each item out as soon as it verifies.
//
// Per device, a lane: a non-blocking stream of our own, an event recorded on
// the caller's stream to order our copies after its work, and an event
// recorded after our copies for the host (WaitStaged, the engine's `ready`)
// and the caller's streams (OrderAfterStaging, the end of a restore) to wait
// on.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "engine/cuda_runtime.h"
#include "engine/staging.h"
#include "engine/step_io.h"
#include "strata/cuda.h"
#include "util/logging.h"
#include "util/mutex.h"

namespace strata {
namespace {

constexpr size_t kAlign = 64;
size_t Padded(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

struct Lane {
  cuda::Stream stream = nullptr;
  cuda::Event caller = nullptr;  // recorded on a caller's stream, waited on by ours
  cuda::Event done = nullptr;    // recorded on ours after the copies
  bool pending = false;          // `done` recorded and not yet waited for by the host
};

class CudaStagerImpl final : public CudaStager {
 public:
  CudaStagerImpl(Checkpointer* ckpt, std::unique_ptr<cuda::Runtime> rt, int devices,
                 const CudaStagerOptions& options)
      : ckpt_(ckpt), rt_(std::move(rt)), devices_(devices), options_(options) {}

  ~CudaStagerImpl() override {
    WaitStaged().IgnoreError();  // a failed copy fails its save; nothing to add here
    ckpt_->AwaitIdle();          // the save in flight reads the staging memory
    cuda::DeviceGuard guard(*rt_);
    for (auto& [device, lane] : lanes_) {
      rt_->cudaSetDevice(device);
      rt_->cudaStreamDestroy(lane.stream);
      rt_->cudaEventDestroy(lane.caller);
      rt_->cudaEventDestroy(lane.done);
    }
    FreePinned();
  }

  StatusOr<SaveResult> Save(int64_t step, std::span<const DeviceItem> items,
                            DeviceSaveMode mode) override;
  Status WaitStaged() override;
  Status OrderAfterStaging(void* stream, int device) override;
  StatusOr<int64_t> RestoreInto(std::span<const MutableDeviceItem> into,
                                const RestoreOptions& options) override;
  CudaStagerStatus status() const override { return {capacity(), pinned_ != nullptr, in_flight_}; }

 private:
  // The state of one restore attempt, shared with the engine's reading
  // threads through RestoreOptions::item_verified.
  struct Attempt {
    Mutex mu;
    bool checked GUARDED_BY(mu) = false;  // this attempt's step was matched to the buffers
    // A mismatch, a failed copy or a failed allocation, from any attempt:
    // the restore returns it (a mismatch is not corruption, so an older step
    // is not restored in its place, as with Checkpointer::RestoreInto).
    Status error GUARDED_BY(mu);
    std::vector<bool> copied GUARDED_BY(mu);
    std::set<std::pair<int, void*>> ordered GUARDED_BY(mu);  // (device, caller stream)
  };

  size_t capacity() const { return pinned_ != nullptr ? pinned_size_ : pageable_.capacity(); }
  std::byte* base() const { return pinned_ != nullptr ? pinned_ : pageable_.data(); }
  Status Reserve(size_t size);
  void FreePinned();
  Status CheckDevice(int device, const std::string& name) const;
  StatusOr<Lane*> LaneFor(int device);
  // Enqueues on `device`'s lane the wait for the caller's `stream` once per
  // (device, stream) in `ordered`. The device must be current.
  Status OrderAfterCaller(int device, void* stream, Lane* lane,
                          std::set<std::pair<int, void*>>* ordered, const std::string& what);
  // Records `done` on every lane in `devices` (each becomes pending).
  Status RecordDone(const std::set<int>& devices);
  // Waits on the host for every lane's stream: nothing of ours reads or
  // writes the staging memory afterwards.
  Status SyncLanes();
  // Enqueues the device->host copy of `from` into `to` on its device's lane,
  // after the caller's stream (once per (device, stream) in `ordered`).
  Status CopyIn(int64_t step, const DeviceItem& from, std::byte* to,
                std::set<std::pair<int, void*>>* ordered);
  // The host->device counterpart for a restore of `step`.
  Status CopyOut(int64_t step, const RestoredItem& from, const MutableDeviceItem& to, Attempt* a)
      REQUIRES(a->mu);

  Checkpointer* const ckpt_;
  const std::unique_ptr<cuda::Runtime> rt_;
  const int devices_;
  const CudaStagerOptions options_;
  std::map<int, Lane> lanes_;  // by device; also reached under Attempt::mu during a restore
  std::byte* pinned_ = nullptr;
  size_t pinned_size_ = 0;
  StagingBuffer pageable_;  // when pinning is off or failed
  bool warned_unpinned_ = false;
  bool in_flight_ = false;  // an overlapped save's copies not yet waited for
};

Status CudaStagerImpl::Reserve(size_t size) {
  if (size <= capacity()) return Status::Ok();
  size = std::max<size_t>(Padded(size), 1 << 16);
  FreePinned();
  if (options_.pin) {
    void* p = nullptr;
    Status s = rt_->Check(rt_->cudaHostAlloc(&p, size, cuda::kHostAllocPortable), "cudaHostAlloc",
                          std::to_string(size) + " bytes of staging memory");
    if (s.ok()) {
      pinned_ = static_cast<std::byte*>(p);
      pinned_size_ = size;
      return Status::Ok();
    }
    rt_->cudaGetLastError();  // handled here: the trainer's next check must not see it
    if (!warned_unpinned_) {
      warned_unpinned_ = true;
      Log()->warn(
          "CUDA staging: cannot pin {} bytes ({}); staging in pageable memory, device "
          "copies will be slower and synchronous",
          size, s.message());
    }
  }
  return pageable_.Reserve(size);
}

void CudaStagerImpl::FreePinned() {
  if (pinned_ != nullptr) rt_->cudaFreeHost(pinned_);
  pinned_ = nullptr;
  pinned_size_ = 0;
}

Status CudaStagerImpl::CheckDevice(int device, const std::string& name) const {
  if (device >= -1 && device < devices_) return Status::Ok();
  return InvalidArgumentError("item \"" + name + "\": CUDA device " + std::to_string(device) +
                              " does not exist (" + std::to_string(devices_) + " visible)");
}

StatusOr<Lane*> CudaStagerImpl::LaneFor(int device) {
  auto it = lanes_.find(device);
  if (it != lanes_.end()) return &it->second;
  const std::string what = "device " + std::to_string(device);
  Lane lane;
  Status s = rt_->Check(rt_->cudaSetDevice(device), "cudaSetDevice", what);
  if (s.ok()) {
    s = rt_->Check(rt_->cudaStreamCreateWithFlags(&lane.stream, cuda::kStreamNonBlocking),
                   "cudaStreamCreateWithFlags", what);
  }
  if (s.ok()) {
    s = rt_->Check(rt_->cudaEventCreateWithFlags(&lane.caller, cuda::kEventDisableTiming),
                   "cudaEventCreateWithFlags", what);
  }
  if (s.ok()) {
    s = rt_->Check(rt_->cudaEventCreateWithFlags(&lane.done, cuda::kEventDisableTiming),
                   "cudaEventCreateWithFlags", what);
  }
  if (!s.ok()) {  // what was created goes with the lane that could not be made
    if (lane.done != nullptr) rt_->cudaEventDestroy(lane.done);
    if (lane.caller != nullptr) rt_->cudaEventDestroy(lane.caller);
    if (lane.stream != nullptr) rt_->cudaStreamDestroy(lane.stream);
    return s;
  }
  return &lanes_.emplace(device, lane).first->second;
}

Status CudaStagerImpl::OrderAfterCaller(int device, void* stream, Lane* lane,
                                        std::set<std::pair<int, void*>>* ordered,
                                        const std::string& what) {
  if (!ordered->emplace(device, stream).second) return Status::Ok();
  STRATA_RETURN_IF_ERROR(
      rt_->Check(rt_->cudaEventRecord(lane->caller, stream), "cudaEventRecord", what));
  return rt_->Check(rt_->cudaStreamWaitEvent(lane->stream, lane->caller, 0), "cudaStreamWaitEvent",
                    what);
}

Status CudaStagerImpl::RecordDone(const std::set<int>& devices) {
  for (int device : devices) {
    Lane& lane = lanes_.at(device);
    const std::string what = "device " + std::to_string(device);
    STRATA_RETURN_IF_ERROR(rt_->Check(rt_->cudaSetDevice(device), "cudaSetDevice", what));
    STRATA_RETURN_IF_ERROR(
        rt_->Check(rt_->cudaEventRecord(lane.done, lane.stream), "cudaEventRecord", what));
    lane.pending = true;
  }
  return Status::Ok();
}

Status CudaStagerImpl::SyncLanes() {
  Status first;
  for (auto& [device, lane] : lanes_) {
    Status s = rt_->Check(rt_->cudaStreamSynchronize(lane.stream), "cudaStreamSynchronize",
                          "device " + std::to_string(device));
    if (first.ok()) first = s;
    lane.pending = false;
  }
  in_flight_ = false;
  return first;
}

Status CudaStagerImpl::CopyIn(int64_t step, const DeviceItem& from, std::byte* to,
                              std::set<std::pair<int, void*>>* ordered) {
  const std::string what = "step " + std::to_string(step) + " item \"" + from.name + "\"";
  STRATA_ASSIGN_OR_RETURN(Lane * lane, LaneFor(from.device));
  STRATA_RETURN_IF_ERROR(rt_->Check(rt_->cudaSetDevice(from.device), "cudaSetDevice", what));
  STRATA_RETURN_IF_ERROR(OrderAfterCaller(from.device, from.stream, lane, ordered, what));
  return rt_->Check(
      rt_->cudaMemcpyAsync(to, from.data, from.size, cuda::kMemcpyDeviceToHost, lane->stream),
      "cudaMemcpyAsync", what);
}

StatusOr<SaveResult> CudaStagerImpl::Save(int64_t step, std::span<const DeviceItem> items,
                                          DeviceSaveMode mode) {
  STRATA_RETURN_IF_ERROR(WaitStaged());
  ckpt_->AwaitIdle();  // the previous save may still read the staging memory
  // Everything the checkpointer would refuse is refused before any copy.
  if (step < 0) return InvalidArgumentError("step " + std::to_string(step) + " is negative");
  std::vector<Item> staged;
  staged.reserve(items.size());
  size_t total = 0;
  for (const DeviceItem& it : items) {
    STRATA_RETURN_IF_ERROR(CheckDevice(it.device, it.name));
    if (it.size > 0 && it.data == nullptr) {
      return InvalidArgumentError("item \"" + it.name + "\": null data for " +
                                  std::to_string(it.size) + " bytes");
    }
    if (it.size > SIZE_MAX - kAlign || __builtin_add_overflow(total, Padded(it.size), &total)) {
      return InvalidArgumentError("item \"" + it.name + "\": the state's size overflows");
    }
    staged.push_back(Item{it.name, it.dtype, it.shape, it.data, it.size});
  }
  STRATA_RETURN_IF_ERROR(ValidateItems(staged).WithContext("step " + std::to_string(step)));
  STRATA_RETURN_IF_ERROR(Reserve(total));
  std::set<int> used;
  Status enqueued;
  {
    cuda::DeviceGuard guard(*rt_);
    std::set<std::pair<int, void*>> ordered;
    size_t offset = 0;
    for (size_t i = 0; i < items.size() && enqueued.ok(); ++i) {
      const DeviceItem& it = items[i];
      std::byte* dst = base() + offset;
      offset += Padded(it.size);
      staged[i].data = dst;  // the checkpointer reads the staged copy
      if (it.size == 0) continue;
      if (it.device < 0) {
        std::memcpy(dst, it.data, it.size);
        continue;
      }
      enqueued = CopyIn(step, it, dst, &ordered);
      used.insert(it.device);
    }
    if (enqueued.ok()) enqueued = RecordDone(used);
  }
  if (!enqueued.ok()) {
    SyncLanes().IgnoreError();  // nothing may still write the staging memory
    return enqueued;
  }
  in_flight_ = !used.empty();
  SaveOptions options;
  options.borrowed = true;
  if (mode == DeviceSaveMode::kBlocking) {
    STRATA_RETURN_IF_ERROR(WaitStaged());
  } else if (in_flight_) {
    // Runs on the engine's writer before it reads a byte. The events are
    // not re-recorded before this save has finished (Save waits for it).
    std::vector<std::pair<int, cuda::Event>> events;
    for (int device : used) events.emplace_back(device, lanes_.at(device).done);
    options.ready = [rt = rt_.get(), events, step]() -> Status {
      for (const auto& [device, event] : events) {
        // The writer thread works on the event's device (no context of
        // device 0 is made for it).
        const std::string what =
            "step " + std::to_string(step) + " staging copies on device " + std::to_string(device);
        STRATA_RETURN_IF_ERROR(rt->Check(rt->cudaSetDevice(device), "cudaSetDevice", what));
        STRATA_RETURN_IF_ERROR(
            rt->Check(rt->cudaEventSynchronize(event), "cudaEventSynchronize", what));
      }
      return Status::Ok();
    };
  }
  return ckpt_->Save(step, staged, options);
}

Status CudaStagerImpl::WaitStaged() {
  if (!in_flight_) return Status::Ok();
  Status first;
  for (auto& [device, lane] : lanes_) {
    if (!lane.pending) continue;
    Status s = rt_->Check(rt_->cudaEventSynchronize(lane.done), "cudaEventSynchronize",
                          "staging copies on device " + std::to_string(device));
    if (first.ok()) first = s;
    lane.pending = false;
  }
  in_flight_ = false;
  return first;
}

Status CudaStagerImpl::OrderAfterStaging(void* stream, int device) {
  auto it = lanes_.find(device);
  if (!in_flight_ || it == lanes_.end() || !it->second.pending) return Status::Ok();
  cuda::DeviceGuard guard(*rt_);
  const std::string what = "device " + std::to_string(device);
  STRATA_RETURN_IF_ERROR(rt_->Check(rt_->cudaSetDevice(device), "cudaSetDevice", what));
  return rt_->Check(rt_->cudaStreamWaitEvent(stream, it->second.done, 0), "cudaStreamWaitEvent",
                    what);
}

Status CudaStagerImpl::CopyOut(int64_t step, const RestoredItem& from, const MutableDeviceItem& to,
                               Attempt* a) {
  if (from.data.empty()) return Status::Ok();
  if (to.device < 0) {
    std::memcpy(to.data, from.data.data(), from.data.size());
    return Status::Ok();
  }
  const std::string what = "restoring step " + std::to_string(step) + " item \"" + to.name + "\"";
  STRATA_ASSIGN_OR_RETURN(Lane * lane, LaneFor(to.device));
  STRATA_RETURN_IF_ERROR(rt_->Check(rt_->cudaSetDevice(to.device), "cudaSetDevice", what));
  STRATA_RETURN_IF_ERROR(OrderAfterCaller(to.device, to.stream, lane, &a->ordered, what));
  return rt_->Check(rt_->cudaMemcpyAsync(to.data, from.data.data(), from.data.size(),
                                         cuda::kMemcpyHostToDevice, lane->stream),
                    "cudaMemcpyAsync", what);
}

StatusOr<int64_t> CudaStagerImpl::RestoreInto(std::span<const MutableDeviceItem> into,
                                              const RestoreOptions& options) {
  STRATA_RETURN_IF_ERROR(WaitStaged());
  std::vector<MutableItem> buffers;
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < into.size(); ++i) {
    const MutableDeviceItem& m = into[i];
    STRATA_RETURN_IF_ERROR(CheckDevice(m.device, m.name));
    if (!by_name.emplace(m.name, i).second) {
      return InvalidArgumentError("restoring: two buffers are named \"" + m.name + "\"");
    }
    buffers.push_back(MutableItem{m.name, m.dtype, m.shape, m.data, m.size});
  }
  // Pairs the step being read with the buffers (once per attempt, before any
  // copy), as Checkpointer::RestoreInto does.
  auto match = [&](const RestoredStep& reading) {
    StepInfo info;
    info.step = reading.step;
    for (const RestoredItem& r : reading.items) {
      info.items.push_back(ItemInfo{r.name, r.dtype, r.shape, r.data.size(), 0, 0, {}});
    }
    std::vector<std::byte*> dst;
    return MatchBuffers(info, buffers, &dst);
  };
  Attempt a;
  cuda::DeviceGuard guard(*rt_);
  RestoreAllocator allocate = [&](size_t size) -> StatusOr<std::span<std::byte>> {
    // An older step is about to be read over the memory the last attempt's
    // copies read from.
    Status ready = SyncLanes();
    if (ready.ok()) ready = Reserve(size);
    MutexLock l(&a.mu);
    if (!ready.ok()) {
      // The engine would take this for a corrupt step and try older ones:
      // kept, so the restore fails with it rather than "nothing verifies".
      if (a.error.ok()) a.error = ready;
      return ready;
    }
    a.checked = false;
    a.copied.assign(into.size(), false);
    a.ordered.clear();
    return std::span<std::byte>(base(), size);
  };
  RestoreOptions opts = options;
  opts.item_verified = [&](const RestoredStep& reading, size_t index) {
    {
      MutexLock l(&a.mu);
      if (!a.checked) {
        if (a.error.ok()) a.error = match(reading);
        a.checked = true;
      }
      if (a.error.ok()) {  // matched: every item has a buffer
        const RestoredItem& item = reading.items[index];
        const size_t target = by_name.at(item.name);
        if (!a.copied[target]) {
          a.error = CopyOut(reading.step, item, into[target], &a);
          a.copied[target] = a.error.ok();
        }
      }
    }
    if (options.item_verified) options.item_verified(reading, index);
  };
  auto restored = ckpt_->RestoreToMemory(allocate, opts);
  MutexLock l(&a.mu);
  Status done = a.error.ok() ? restored.status() : a.error;
  if (done.ok() && !a.checked) done = match(*restored);  // a step with no items
  for (size_t i = 0; done.ok() && i < restored->items.size(); ++i) {
    const size_t target = by_name.at(restored->items[i].name);
    if (!a.copied[target]) done = CopyOut(restored->step, restored->items[i], into[target], &a);
  }
  // Later work on each buffer's stream follows the copies, and the host
  // returns with them done (the staging memory is free again).
  std::set<int> used;
  for (const auto& [device, stream] : a.ordered) used.insert(device);
  if (done.ok()) done = RecordDone(used);
  for (const auto& [device, stream] : a.ordered) {
    if (!done.ok()) break;
    const std::string what = "restoring step " + std::to_string(restored->step) + " onto device " +
                             std::to_string(device);
    done = rt_->Check(rt_->cudaSetDevice(device), "cudaSetDevice", what);
    if (done.ok()) {
      done = rt_->Check(rt_->cudaStreamWaitEvent(stream, lanes_.at(device).done, 0),
                        "cudaStreamWaitEvent", what);
    }
  }
  Status synced = SyncLanes();
  if (!done.ok()) return done;
  STRATA_RETURN_IF_ERROR(synced);
  return restored->step;
}

}  // namespace

StatusOr<std::unique_ptr<CudaStager>> CudaStager::Open(Checkpointer* ckpt,
                                                       const CudaStagerOptions& options) {
  if (ckpt == nullptr) return InvalidArgumentError("CudaStager::Open: no checkpointer");
  STRATA_ASSIGN_OR_RETURN(auto rt, cuda::Runtime::Load(options.runtime_library));
  int devices = 0;
  const int err = rt->cudaGetDeviceCount(&devices);
  if (err != 0 || devices <= 0) {
    const Status why = rt->Check(err, "cudaGetDeviceCount", rt->path());
    return UnavailableError("no CUDA device: " +
                            (err != 0 ? why.message() : rt->path() + " sees none"));
  }
  return std::unique_ptr<CudaStager>(new CudaStagerImpl(ckpt, std::move(rt), devices, options));
}

}  // namespace strata
