// Copyright 2026 The Strata Authors.
//
// StepLock: a committed step's files are not recycled while they are read.
//
// A committed step's data files are rewritten in one case only: a save
// takes the files of the step retention retires (SlotPool's recycling,
// WriteStepRequest::recycle_dir). A reader in this process or another -- a
// restore of the directory without a checkpointer, strata.dcp's reader, a
// verify -- holds a shared flock(2) on the step's directory while it reads
// and, where it maps the files (VerifyMapped), for as long as the mapping
// lives (RestoredStep::hold). A save takes the lock exclusively, without
// waiting, before it renames a step out of the namespace to reuse its
// files, and releases it once renamed; when a reader holds it, the save
// reuses nothing: retention removes that step as always (an unlinked file
// keeps its pages for a mapping or an open descriptor until they go) and
// the save makes new files. So bytes a reader verified never change under
// it, and a mapped file never shrinks under it (SIGBUS). The price: while
// a reader holds a step retention dropped, host memory holds that step
// beyond the (k + 1) * S of engine/slot_pool.h.
//
// Where the file system has no flock (ENOLCK, EOPNOTSUPP: some network
// file systems), nothing is locked and both sides go on as if unlocked.
#ifndef STRATA_ENGINE_STEP_LOCK_H_
#define STRATA_ENGINE_STEP_LOCK_H_

#include <optional>
#include <string>
#include <utility>

#include "strata/env.h"
#include "strata/status.h"
#include "util/unique_fd.h"

namespace strata {

class StepLock {
 public:
  StepLock() = default;  // holds nothing

  // Shared, for reading `step_dir`: waits while a save holds it (for the
  // length of a rename). NOT_FOUND when `step_dir` is gone, or was renamed
  // away between its opening and the lock (a save took its files).
  static StatusOr<StepLock> ForReading(const std::string& step_dir);

  // Exclusive, for renaming `step_dir` away to reuse its files, without
  // waiting: nullopt while a reader holds it. Held until the object goes.
  static StatusOr<std::optional<StepLock>> ForRecycling(const std::string& step_dir);

  bool held() const { return fd_.valid(); }

 private:
  explicit StepLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing it releases the lock
};

// Renames committed `step_dir` to `to` (a temporary name whose files a
// save reuses) holding its lock for recycling: false, nothing renamed,
// while a reader holds the step.
StatusOr<bool> RenameUnlessRead(Env* env, const std::string& step_dir, const std::string& to);

}  // namespace strata

#endif  // STRATA_ENGINE_STEP_LOCK_H_
