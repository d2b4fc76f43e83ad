// Copyright 2026 The Strata Authors.
//
// HostBounce: page-locked chunks that host->device copies from pageable
// memory pass through. A cudaMemcpyAsync from pageable memory holds the
// calling thread until the driver has staged every byte through its own
// small buffers, one copy at a time, at a fraction of a page-locked copy's
// speed. A restore whose step was mapped from files nobody page-locked (the
// first restore of a restarted job) or read into ordinary memory would copy
// at that speed. Through the chunks, the reading threads each copy a
// verified range into a chunk of their own (in parallel, while the range is
// still in the CPU's cache), and the device's lane (engine/device_lanes.h)
// moves it at the page-locked speed. A chunk is reused once an event
// recorded on the lane after its copy has completed.
//
// Chunks are page-locked as they are first needed, up to a bound per
// device, and freed with the object. Thread-safe.
#ifndef STRATA_ENGINE_HOST_BOUNCE_H_
#define STRATA_ENGINE_HOST_BOUNCE_H_

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "engine/device_lanes.h"
#include "strata/status.h"
#include "util/mutex.h"

namespace strata {

class HostBounce {
 public:
  static constexpr size_t kChunkBytes = 4 << 20;
  static constexpr int kChunksPerDevice = 16;

  struct Chunk {
    std::byte* data = nullptr;
    cuda::Event copied = nullptr;  // recorded on the lane after the copy out of `data`
    int device = -1;
    bool recorded = false;  // `copied` was recorded since the chunk was last waited for
  };

  // `lanes` must outlive the object; its runtime page-locks the chunks.
  explicit HostBounce(const DeviceLanes& lanes, size_t chunk_bytes = kChunkBytes,
                      int per_device = kChunksPerDevice);
  // Waits for each chunk's last copy, then frees them.
  ~HostBounce();
  HostBounce(const HostBounce&) = delete;
  HostBounce& operator=(const HostBounce&) = delete;

  // A chunk of `device` whose last copy is done: a free one, else a new one
  // while fewer than the bound exist, else the next one released. Once a
  // chunk of a device could not be page-locked, no more are tried there:
  // the ones made serve; with none, nullptr (the caller copies from
  // pageable memory instead; Refused() says why). An error is the
  // runtime's, waiting for the chunk's last copy; nothing is held then.
  StatusOr<Chunk*> Acquire(int device);
  // Why a chunk of `device` could not be page-locked (OK: none was refused).
  Status Refused(int device);
  // Gives `chunk` back; `copy_recorded`: its `copied` event was recorded
  // after a copy out of it.
  void Release(Chunk* chunk, bool copy_recorded);

  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  struct Device {
    std::vector<std::unique_ptr<Chunk>> chunks;  // every chunk made (for the destructor)
    std::vector<Chunk*> free;
    int making = 0;  // chunks being page-locked now
    Status refused;  // why the last chunk could not be page-locked
  };
  StatusOr<std::unique_ptr<Chunk>> Make(int device) const;
  Status AwaitCopied(Chunk* chunk) const;

  const DeviceLanes& lanes_;
  const size_t chunk_bytes_;
  const int per_device_;
  Mutex mu_;
  CondVar released_;
  std::map<int, Device> devices_ GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_ENGINE_HOST_BOUNCE_H_
