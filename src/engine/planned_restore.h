// Copyright 2026 The Strata Authors.
//
// PlannedRestore: a restore that copies each chunk of the step being read
// to its destination -- a CUDA buffer (host->device on the device's lane,
// engine/device_lanes.h) or host memory -- as soon as the chunk is verified,
// on the thread that verified it, while the rest of the step is still read.
// A chunk in pageable memory (a step mapped from files no one page-locked,
// as after a restart) goes through page-locked chunks (engine/host_bounce.h),
// so the copies run at the page-locked speed and in parallel. Where each item goes is known
// once a planner says so: at once (CudaStager::RestoreInto matches the step
// to the caller's buffers) or once a key item is in (a state tree stored in
// the step: CudaStager::RestorePlanned, strata.torch, strata.dcp).
//
// One restore at a time per object; the reader's threads call in
// concurrently (serialized inside).
#ifndef STRATA_ENGINE_PLANNED_RESTORE_H_
#define STRATA_ENGINE_PLANNED_RESTORE_H_

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/device_lanes.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"
#include "strata/status.h"

namespace strata {

class PlannedRestore {
 public:
  // Says where each item of the step being read goes, once it can:
  // nullopt while it cannot yet (`verified` says which items are in
  // memory); else one destination per item of the step (data null: none).
  using Planner = std::function<StatusOr<std::optional<std::vector<MutableDeviceItem>>>(
      const RestoredStep& reading, const std::vector<bool>& verified)>;
  // Reads a step (the Checkpointer's choice, or one directory's step) into
  // the memory `allocate` lends, reporting items as they verify.
  using Reader = std::function<StatusOr<RestoredStep>(const RestoreAllocator& allocate,
                                                      const RestoreOptions& options)>;

  // `lanes` null: host destinations only. `devices`: the CUDA devices seen.
  // `page_lock` false: copies from pageable memory are made from it, not
  // through page-locked chunks (nothing is page-locked).
  PlannedRestore(DeviceLanes* lanes, int devices, bool page_lock = true)
      : lanes_(lanes), devices_(devices), page_lock_(page_lock) {}

  // Reads through `read` into the engine's memory, or `block` when it is
  // large enough; copies each planned chunk as soon as it is verified and
  // planned; then orders each destination's stream after its copies and
  // waits for them all. Returns the step read.
  StatusOr<RestoredStep> Run(const Reader& read, const Planner& planner, std::span<std::byte> block,
                             const RestoreOptions& options);

  // INVALID_ARGUMENT unless `device` is -1 (host) or a device seen.
  Status CheckDevice(int device, const std::string& name) const;

  // A planner for RestorePlanned: when the step has item `key` and it is
  // verified, `plan` says where items go (by name; each checked against
  // its item's size); a step without `key` plans nothing.
  static Planner FromPlan(const PlannedRestore& restore, const std::string& key,
                          const CudaStager::RestorePlan& plan);

 private:
  struct Attempt;
  struct Range;
  // The bookkeeping of `reading`'s items sized. REQUIRES: a.mu.
  static void Grow(const RestoredStep& reading, Attempt& a);
  // Adds `r` to `out` if its item has a destination (where it goes filled
  // in). REQUIRES: a.mu, the attempt planned.
  static void Take(const RestoredStep& reading, Attempt& a, Range r, std::vector<Range>* out);
  // Whether the planner is to be asked: nothing is planned, no one is
  // asking, no error, and more is verified than when it was last asked.
  // REQUIRES: a.mu.
  static bool PlanDue(const Attempt& a);
  // Plans `reading` if it is not yet and the planner can; the chunks
  // verified before go to `out`. The planner is asked without a.mu, by one
  // thread at a time, at most once per change of what is verified; the
  // other threads read on meanwhile. EXCLUDES: a.mu.
  static void Plan(const Planner& planner, const RestoredStep& reading, Attempt& a,
                   std::vector<Range>* out);
  // Copies each range (the first failure becomes the attempt's error).
  // Without a.mu: the copies from pageable memory run in parallel.
  void CopyAll(int64_t step, Attempt& a, const std::vector<Range>& ranges);
  // One range to its destination: host memory by memcpy; to a device on its
  // lane, from page-locked memory directly, else through a.bounce.
  Status Copy(int64_t step, Attempt& a, const Range& r);

  DeviceLanes* const lanes_;
  const int devices_;
  const bool page_lock_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_PLANNED_RESTORE_H_
