// Copyright 2026 The Strata Authors.
#include "engine/planned_restore.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "engine/host_bounce.h"
#include "util/logging.h"
#include "util/mutex.h"

namespace strata {

// The state of one attempt (one step tried), shared with the reading
// threads through RestoreOptions::chunk_verified and item_verified.
struct PlannedRestore::Attempt {
  Mutex mu;
  bool planned GUARDED_BY(mu) = false;  // `dest` is known for this attempt's step
  // A thread is asking the planner now (outside `mu`: a planner may take
  // long, as strata.torch's does, while the other threads read on).
  bool planning GUARDED_BY(mu) = false;
  // Bumped whenever `verified` changes; `asked`: its value the planner was
  // last asked with (the planner's answer changes only with `verified`).
  uint64_t verified_version GUARDED_BY(mu) = 0;
  uint64_t asked GUARDED_BY(mu) = UINT64_MAX;
  // A mismatch, a failed copy or a failed allocation, from any attempt: the
  // restore returns it (a mismatch is not corruption, so an older step is
  // not restored in its place, as with Checkpointer::RestoreInto).
  Status error GUARDED_BY(mu);
  // By item of the step read: its destination (data null: none), whether it
  // is verified, and how many of its bytes were handed to copies.
  std::vector<MutableDeviceItem> dest GUARDED_BY(mu);
  std::vector<bool> verified GUARDED_BY(mu);
  std::vector<uint64_t> handed GUARDED_BY(mu);
  // Chunks verified before the plan was made: copied once it is.
  std::vector<Range> waiting GUARDED_BY(mu);
  // Page-locked chunks for copies from pageable memory (with lanes).
  std::optional<HostBounce> bounce;
  std::atomic<bool> warned{false};  // that the chunks could not be page-locked
};

// An item's verified range, and once planned where it goes. The pointers
// stay valid while the attempt lasts: `dest` is not changed once planned.
struct PlannedRestore::Range {
  size_t item = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  const std::byte* from = nullptr;
  const MutableDeviceItem* to = nullptr;
};

Status PlannedRestore::CheckDevice(int device, const std::string& name) const {
  if (device >= -1 && device < devices_) return Status::Ok();
  if (devices_ == 0) {
    return InvalidArgumentError("item \"" + name + "\" is on CUDA device " +
                                std::to_string(device) + ", but this process has no CUDA");
  }
  return InvalidArgumentError("item \"" + name + "\": CUDA device " + std::to_string(device) +
                              " does not exist (" + std::to_string(devices_) + " visible)");
}

// REQUIRES: a.mu held.
void PlannedRestore::Grow(const RestoredStep& reading, Attempt& a) NO_THREAD_SAFETY_ANALYSIS {
  a.verified.resize(reading.items.size(), false);
  a.handed.resize(reading.items.size(), 0);
}

// REQUIRES: a.mu held, a.planned.
void PlannedRestore::Take(const RestoredStep& reading, Attempt& a, Range r,
                          std::vector<Range>* out) NO_THREAD_SAFETY_ANALYSIS {
  const MutableDeviceItem& to = a.dest[r.item];
  if (to.data == nullptr || r.size == 0) return;
  r.from = reading.items[r.item].data.data() + r.offset;
  r.to = &to;
  a.handed[r.item] += r.size;
  out->push_back(r);
}

// REQUIRES: a.mu held.
bool PlannedRestore::PlanDue(const Attempt& a) NO_THREAD_SAFETY_ANALYSIS {
  return !a.planned && !a.planning && a.error.ok() && a.asked != a.verified_version;
}

void PlannedRestore::Plan(const Planner& planner, const RestoredStep& reading, Attempt& a,
                          std::vector<Range>* out) {
  for (;;) {
    std::vector<bool> verified;
    {
      MutexLock l(&a.mu);
      if (!PlanDue(a)) return;
      a.planning = true;
      a.asked = a.verified_version;
      verified = a.verified;
    }
    auto dest = planner(reading, verified);
    MutexLock l(&a.mu);
    a.planning = false;
    if (!dest.ok()) {
      if (a.error.ok()) a.error = dest.status();
      return;
    }
    if (dest->has_value()) {
      a.dest = std::move(**dest);
      a.dest.resize(reading.items.size());
      a.planned = true;
      for (const Range& r : a.waiting) Take(reading, a, r, out);
      a.waiting.clear();
      return;
    }
    // Not yet: asked again if more items were verified while it was asked.
  }
}

void PlannedRestore::CopyAll(int64_t step, Attempt& a, const std::vector<Range>& ranges) {
  for (const Range& r : ranges) {
    Status s = Copy(step, a, r);
    if (!s.ok()) {
      MutexLock l(&a.mu);
      if (a.error.ok()) a.error = s;
      return;
    }
  }
}

Status PlannedRestore::Copy(int64_t step, Attempt& a, const Range& r) {
  const MutableDeviceItem& to = *r.to;
  std::byte* dst = static_cast<std::byte*>(to.data) + r.offset;
  if (to.device < 0) {
    std::memcpy(dst, r.from, r.size);
    return Status::Ok();
  }
  const std::string what = "restoring step " + std::to_string(step) + " item \"" + to.name + "\"";
  bool locked = true;
  if (a.bounce) {
    auto asked = lanes_->PageLocked(to.device, r.from);
    if (!asked.ok()) return asked.status().WithContext(what);
    locked = *asked;
  }
  for (uint64_t done = 0; !locked && done < r.size;) {
    auto acquired = a.bounce->Acquire(to.device);
    if (!acquired.ok()) return acquired.status().WithContext(what);
    HostBounce::Chunk* const chunk = *acquired;
    if (chunk == nullptr) {  // nothing can be page-locked
      if (!a.warned.exchange(true)) {
        Log()->warn("{}: copying from pageable memory, at a fraction of the speed: {}", what,
                    a.bounce->Refused(to.device).message());
      }
      MutexLock l(&a.mu);
      return lanes_->Copy(to.device, to.stream, dst + done, r.from + done, r.size - done,
                          cuda::kMemcpyHostToDevice, what);
    }
    const uint64_t n = std::min<uint64_t>(r.size - done, a.bounce->chunk_bytes());
    std::memcpy(chunk->data, r.from + done, n);
    Status s;
    bool recorded = false;
    {
      MutexLock l(&a.mu);
      s = lanes_->Copy(to.device, to.stream, dst + done, chunk->data, n, cuda::kMemcpyHostToDevice,
                       what);
      if (s.ok()) {
        s = lanes_->Record(to.device, chunk->copied);
        recorded = s.ok();
        if (!s.ok()) lanes_->Sync().IgnoreError();  // the chunk is free once the lane is idle
      }
    }
    a.bounce->Release(chunk, recorded);
    STRATA_RETURN_IF_ERROR(s);
    done += n;
  }
  if (!locked) return Status::Ok();
  MutexLock l(&a.mu);
  return lanes_->Copy(to.device, to.stream, dst, r.from, r.size, cuda::kMemcpyHostToDevice, what);
}

StatusOr<RestoredStep> PlannedRestore::Run(const Reader& read, const Planner& planner,
                                           std::span<std::byte> block,
                                           const RestoreOptions& options) {
  if (lanes_) lanes_->Begin();
  Attempt a;
  if (lanes_ && page_lock_) a.bounce.emplace(*lanes_);
  RestoreAllocator allocate = [&](size_t size) -> StatusOr<std::span<std::byte>> {
    // An older step is about to be read over the memory the last attempt's
    // copies read from.
    Status ready = lanes_ ? lanes_->Sync() : Status::Ok();
    MutexLock l(&a.mu);
    if (!ready.ok()) {
      // The engine would take this for a corrupt step and try older ones:
      // kept, so the restore fails with it rather than "nothing verifies".
      if (a.error.ok()) a.error = ready;
      return ready;
    }
    a.planned = false;
    a.asked = UINT64_MAX;
    a.dest.clear();
    a.verified.clear();
    a.handed.clear();
    a.waiting.clear();
    if (block.size() < size) return std::span<std::byte>();
    return block.first(size);
  };
  // Each chunk is copied by the thread that verified it, as soon as the
  // plan is known (while its bytes are likely still in that CPU's cache).
  RestoreOptions opts = options;
  opts.chunk_verified = [&](const RestoredStep& reading, size_t item, uint64_t offset,
                            uint64_t size) {
    std::vector<Range> now;
    bool due = false;
    {
      MutexLock l(&a.mu);
      Grow(reading, a);
      const Range r{item, offset, size};
      if (a.error.ok() && a.planned) {
        Take(reading, a, r, &now);
      } else if (a.error.ok()) {
        a.waiting.push_back(r);  // taken by whoever makes the plan
      }
      due = PlanDue(a);
    }
    if (due) Plan(planner, reading, a, &now);
    CopyAll(reading.step, a, now);
    if (options.chunk_verified) options.chunk_verified(reading, item, offset, size);
  };
  opts.item_verified = [&](const RestoredStep& reading, size_t index) {
    std::vector<Range> now;
    {
      MutexLock l(&a.mu);
      Grow(reading, a);
      a.verified[index] = true;
      ++a.verified_version;
    }
    Plan(planner, reading, a, &now);
    CopyAll(reading.step, a, now);
    if (options.item_verified) options.item_verified(reading, index);
  };
  auto restored = read(allocate, opts);
  Status done;
  std::vector<Range> now;
  {
    MutexLock l(&a.mu);
    done = a.error.ok() ? restored.status() : a.error;
    if (done.ok()) {  // every item is verified now (a step with none was never reported)
      Grow(*restored, a);
      a.verified.assign(restored->items.size(), true);
      ++a.verified_version;
    }
  }
  if (done.ok()) {  // the reading threads are done: no one else plans or takes
    Plan(planner, *restored, a, &now);
    MutexLock l(&a.mu);
    // What no chunk report covered (a reader that reports items only).
    for (size_t i = 0; i < restored->items.size() && a.planned; ++i) {
      const uint64_t size = restored->items[i].data.size();
      if (a.handed[i] < size) Take(*restored, a, Range{i, 0, size}, &now);
    }
    done = a.error;
  }
  if (!now.empty()) CopyAll(restored->step, a, now);  // only when the step was read
  {
    MutexLock l(&a.mu);
    if (done.ok()) done = a.error;
  }
  // Later work on each destination's stream follows the copies, and the
  // host returns with them done (the memory read into is free again).
  if (lanes_) {
    if (done.ok()) done = lanes_->Finish();
    if (done.ok()) done = lanes_->OrderCallers();
    Status synced = lanes_->Sync();
    if (done.ok()) done = synced;
  }
  if (!done.ok()) return done;
  return restored;
}

PlannedRestore::Planner PlannedRestore::FromPlan(const PlannedRestore& restore,
                                                 const std::string& key,
                                                 const CudaStager::RestorePlan& plan) {
  // Where `key` is in the step being read, found once per step (the planner
  // is asked after every item until the key is in).
  struct Found {
    const RestoredStep* reading = nullptr;
    int64_t step = -1;
    size_t key = 0;  // npos: the step has no item `key`
  };
  auto found = std::make_shared<Found>();
  return [&restore, key, &plan, found](const RestoredStep& reading,
                                       const std::vector<bool>& verified)
             -> StatusOr<std::optional<std::vector<MutableDeviceItem>>> {
    if (found->reading != &reading || found->step != reading.step) {
      found->reading = &reading;
      found->step = reading.step;
      found->key = std::string::npos;
      for (size_t i = 0; i < reading.items.size(); ++i) {
        if (reading.items[i].name == key) found->key = i;
      }
    }
    std::vector<MutableDeviceItem> dest;
    if (found->key == std::string::npos) return std::optional(std::move(dest));  // nothing to do
    if (!verified[found->key]) return std::optional<std::vector<MutableDeviceItem>>();
    dest.resize(reading.items.size());
    std::unordered_map<std::string_view, size_t> index;
    for (size_t i = 0; i < reading.items.size(); ++i) index.emplace(reading.items[i].name, i);
    STRATA_ASSIGN_OR_RETURN(auto planned, plan(reading, reading.items[found->key]));
    const std::string where = "restoring step " + std::to_string(reading.step);
    for (MutableDeviceItem& m : planned) {
      auto it = index.find(m.name);
      if (it == index.end()) {
        return InvalidArgumentError(where + ": no item \"" + m.name + "\" to copy");
      }
      STRATA_RETURN_IF_ERROR(restore.CheckDevice(m.device, m.name));
      const size_t size = reading.items[it->second].data.size();
      if (m.size != size || (m.size > 0 && m.data == nullptr)) {
        return InvalidArgumentError(where + " item \"" + m.name + "\": " + std::to_string(size) +
                                    " bytes into a buffer of " + std::to_string(m.size));
      }
      dest[it->second] = std::move(m);
    }
    return std::optional(std::move(dest));
  };
}

}  // namespace strata
