// Copyright 2026 The Strata Authors.
#include "engine/host_bounce.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace strata {

HostBounce::HostBounce(const DeviceLanes& lanes, size_t chunk_bytes, int per_device)
    : lanes_(lanes), chunk_bytes_(chunk_bytes), per_device_(std::max(per_device, 1)) {}

HostBounce::~HostBounce() {
  const cuda::Runtime& rt = lanes_.runtime();
  cuda::DeviceGuard guard(rt);
  MutexLock l(&mu_);
  bool failed = false;
  for (auto& [device, d] : devices_) {
    for (const std::unique_ptr<Chunk>& c : d.chunks) {
      // Freed only once no copy reads it (a failure was the restore's to report).
      if (c->recorded) AwaitCopied(c.get()).IgnoreError();
      std::optional<cuda::CaptureRelaxed> relaxed;
      failed |= !lanes_.Use(device, relaxed).ok();
      failed |= rt.cudaEventDestroy(c->copied) != 0;
      failed |= rt.cudaFreeHost(c->data) != 0;
    }
  }
  if (failed) rt.cudaGetLastError();  // not the caller's to see
}

StatusOr<std::unique_ptr<HostBounce::Chunk>> HostBounce::Make(int device) const {
  const cuda::Runtime& rt = lanes_.runtime();
  auto chunk = std::make_unique<Chunk>();
  chunk->device = device;
  STRATA_ASSIGN_OR_RETURN(chunk->copied, lanes_.EventOn(device));
  std::optional<cuda::CaptureRelaxed> relaxed;
  void* p = nullptr;
  Status s = lanes_.Use(device, relaxed);
  if (s.ok()) {
    s = rt.Check(rt.cudaHostAlloc(&p, chunk_bytes_, cuda::kHostAllocPortable), "cudaHostAlloc",
                 "a page-locked chunk of " + std::to_string(chunk_bytes_) + " bytes for device " +
                     std::to_string(device));
  }
  if (!s.ok()) {
    if (rt.cudaEventDestroy(chunk->copied) != 0) rt.cudaGetLastError();
    return s;
  }
  chunk->data = static_cast<std::byte*>(p);
  return chunk;
}

Status HostBounce::AwaitCopied(Chunk* chunk) const {
  const cuda::Runtime& rt = lanes_.runtime();
  std::optional<cuda::CaptureRelaxed> relaxed;
  STRATA_RETURN_IF_ERROR(lanes_.Use(chunk->device, relaxed));
  STRATA_RETURN_IF_ERROR(rt.Check(rt.cudaEventSynchronize(chunk->copied), "cudaEventSynchronize",
                                  "a copy to device " + std::to_string(chunk->device)));
  chunk->recorded = false;
  return Status::Ok();
}

StatusOr<HostBounce::Chunk*> HostBounce::Acquire(int device) {
  Chunk* chunk = nullptr;
  {
    MutexLock l(&mu_);
    Device& d = devices_[device];  // a map's elements stay where they are
    while (chunk == nullptr) {
      const int have = static_cast<int>(d.chunks.size()) + d.making;
      if (!d.free.empty()) {
        chunk = d.free.back();
        d.free.pop_back();
      } else if (d.refused.ok() && have < per_device_) {
        ++d.making;
        l.Unlock();  // page-locked outside the lock: other threads go on
        auto made = Make(device);
        l.Lock();
        --d.making;
        if (made.ok()) {
          d.chunks.push_back(std::move(*made));
          chunk = d.chunks.back().get();
        } else {
          d.refused = made.status();  // not tried again: the chunks there are, or none
          released_.SignalAll();
        }
      } else if (have == 0) {
        return nullptr;  // none can be made, none to wait for
      } else {
        released_.Wait(&mu_);
      }
    }
  }
  if (chunk->recorded) {
    Status s = AwaitCopied(chunk);
    if (!s.ok()) {
      Release(chunk, true);
      return s;
    }
  }
  return chunk;
}

Status HostBounce::Refused(int device) {
  MutexLock l(&mu_);
  return devices_[device].refused;
}

void HostBounce::Release(Chunk* chunk, bool copy_recorded) {
  chunk->recorded = chunk->recorded || copy_recorded;
  MutexLock l(&mu_);
  devices_[chunk->device].free.push_back(chunk);
  released_.SignalAll();  // waiters of every device share the variable
}

}  // namespace strata
