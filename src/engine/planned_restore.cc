// Copyright 2026 The Strata Authors.
#include "engine/planned_restore.h"

#include <cstring>
#include <memory>
#include <unordered_map>

#include "util/mutex.h"

namespace strata {

// The state of one attempt (one step tried), shared with the reading
// threads through RestoreOptions::item_verified.
struct PlannedRestore::Attempt {
  Mutex mu;
  bool planned GUARDED_BY(mu) = false;  // `dest` is known for this attempt's step
  // A mismatch, a failed copy or a failed allocation, from any attempt: the
  // restore returns it (a mismatch is not corruption, so an older step is
  // not restored in its place, as with Checkpointer::RestoreInto).
  Status error GUARDED_BY(mu);
  // By item of the step read: its destination (data null: none), whether it
  // is verified and whether it was copied.
  std::vector<MutableDeviceItem> dest GUARDED_BY(mu);
  std::vector<bool> verified GUARDED_BY(mu);
  std::vector<bool> copied GUARDED_BY(mu);
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

Status PlannedRestore::CopyOut(int64_t step, const RestoredItem& from,
                               const MutableDeviceItem& to) {
  if (from.data.empty()) return Status::Ok();
  if (to.device < 0) {
    std::memcpy(to.data, from.data.data(), from.data.size());
    return Status::Ok();
  }
  return lanes_->Copy(to.device, to.stream, to.data, from.data.data(), from.data.size(),
                      cuda::kMemcpyHostToDevice,
                      "restoring step " + std::to_string(step) + " item \"" + to.name + "\"");
}

// REQUIRES: a.mu held.
void PlannedRestore::Advance(const Planner& planner, const RestoredStep& reading, Attempt& a,
                             size_t index) NO_THREAD_SAFETY_ANALYSIS {
  if (!a.error.ok()) return;
  if (!a.planned) {
    auto dest = planner(reading, a.verified);
    if (!dest.ok()) {
      a.error = dest.status();
      return;
    }
    if (!dest->has_value()) return;
    a.dest = std::move(**dest);
    a.dest.resize(reading.items.size());
    a.planned = true;
    index = std::string::npos;  // the items verified before the plan too
  }
  const size_t first = index == std::string::npos ? 0 : index;
  const size_t end = index == std::string::npos ? reading.items.size() : index + 1;
  for (size_t i = first; i < end && a.error.ok(); ++i) {
    if (!a.verified[i] || a.copied[i] || a.dest[i].data == nullptr) continue;
    a.error = CopyOut(reading.step, reading.items[i], a.dest[i]);
    a.copied[i] = a.error.ok();
  }
}

StatusOr<RestoredStep> PlannedRestore::Run(const Reader& read, const Planner& planner,
                                           std::span<std::byte> block,
                                           const RestoreOptions& options) {
  if (lanes_) lanes_->Begin();
  Attempt a;
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
    a.dest.clear();
    a.verified.clear();
    a.copied.clear();
    if (block.size() < size) return std::span<std::byte>();
    return block.first(size);
  };
  RestoreOptions opts = options;
  opts.item_verified = [&](const RestoredStep& reading, size_t index) {
    {
      MutexLock l(&a.mu);
      a.verified.resize(reading.items.size(), false);
      a.copied.resize(reading.items.size(), false);
      a.verified[index] = true;
      Advance(planner, reading, a, index);
    }
    if (options.item_verified) options.item_verified(reading, index);
  };
  auto restored = read(allocate, opts);
  Status done;
  {
    MutexLock l(&a.mu);
    done = a.error.ok() ? restored.status() : a.error;
    if (done.ok()) {  // every item is verified now (a step with none was never reported)
      a.verified.assign(restored->items.size(), true);
      a.copied.resize(restored->items.size(), false);
      Advance(planner, *restored, a, std::string::npos);
      done = a.error;
    }
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
