// Copyright 2026 The Strata Authors.
#include "engine/slot_pool.h"

#include "engine/step_lock.h"
#include "format/naming.h"
#include "util/crash_point.h"
#include "util/file_util.h"
#include "util/logging.h"

namespace strata {

SlotPool::~SlotPool() {
  MutexLock l(&mu_);
  if (free_) Discard(std::move(free_));
  held_.clear();
}

void SlotPool::SetRegistrar(MemoryRegistrar* registrar) {
  MutexLock l(&mu_);
  registrar_ = registrar;
  if (free_) free_->Register(registrar);
  for (auto& [step, slot] : held_) slot->Register(registrar);
}

StatusOr<std::unique_ptr<StepSlot>> SlotPool::Make(std::string dir, const StepInfo& layout) {
  MemoryRegistrar* registrar = nullptr;
  {
    MutexLock l(&mu_);
    registrar = registrar_;
  }
  return StepSlot::Prepare(env_, pool_, std::move(dir), layout, registrar);
}

void SlotPool::Discard(std::unique_ptr<StepSlot> slot) {
  const std::string dir = slot->dir();
  slot.reset();  // unmapped (and unlocked) before its pages go
  Status s = env_->RemoveAll(dir);
  if (!s.ok()) Log()->warn("removing the step files in {}: {}", dir, s.message());
}

StatusOr<std::unique_ptr<StepSlot>> SlotPool::Acquire(int64_t step, const StepInfo& layout) {
  std::unique_ptr<StepSlot> slot;
  {
    MutexLock l(&mu_);
    slot = std::move(free_);
  }
  if (slot && slot->Fits(layout)) {
    slot->Relayout(layout);
    return slot;
  }
  std::string dir;
  if (slot) {  // the free files, reshaped
    dir = slot->dir();
    slot.reset();
  } else {
    STRATA_ASSIGN_OR_RETURN(slot, RetireOldest(step, layout));
    if (slot) {
      if (slot->Fits(layout)) {
        slot->Relayout(layout);
        return slot;
      }
      dir = slot->dir();
      slot.reset();
    }
  }
  if (dir.empty()) dir = JoinPath(dir_, TempDirName(0));
  auto made = Make(dir, layout);
  if (!made.ok()) env_->RemoveAll(dir).IgnoreError();  // nothing committed lives there
  return made;
}

StatusOr<std::unique_ptr<StepSlot>> SlotPool::RetireOldest(int64_t step, const StepInfo& layout) {
  if (!options_.recycle_space || options_.max_to_keep < 2) return std::unique_ptr<StepSlot>();
  STRATA_ASSIGN_OR_RETURN(auto steps, ListSteps(dir_, env_));
  if (static_cast<int>(steps.size()) < options_.max_to_keep || steps.front() >= step) {
    return std::unique_ptr<StepSlot>();
  }
  const int64_t oldest = steps.front();
  std::unique_ptr<StepSlot> slot;
  {
    MutexLock l(&mu_);
    auto it = held_.find(oldest);
    if (it != held_.end()) {
      slot = std::move(it->second);
      held_.erase(it);
    }
  }
  if (slot && !slot->Intact(env_)) slot.reset();  // another process replaced its files
  auto keep = [&] {
    if (!slot) return;
    MutexLock l(&mu_);
    held_[oldest] = std::move(slot);
  };
  const std::string step_dir = JoinPath(dir_, StepDirName(oldest));
  if (!slot || !slot->Fits(layout)) {  // reshaped: checked before the step is retired
    Status room = StepSlot::CheckRoom(env_, step_dir, layout);
    if (!room.ok()) {
      keep();
      return room.WithContext("saving step " + std::to_string(step) + " (step " +
                              std::to_string(oldest) + " is kept)");
    }
  }
  const std::string tmp = JoinPath(dir_, TempDirName(oldest));
  auto renamed = RenameUnlessRead(env_, step_dir, tmp);
  if (!renamed.ok())
    return renamed.status().WithContext("recycling step " + std::to_string(oldest));
  if (!*renamed) {
    keep();
    Log()->info("step {} in {} is being read: step {} is saved to new files", oldest, dir_, step);
    return std::unique_ptr<StepSlot>();
  }
  CrashPoint("save.after_retire");
  if (slot) {
    slot->Moved(tmp);
    return slot;
  }
  // Not mapped yet (a step of an earlier process): its files, reshaped.
  auto made = Make(tmp, layout);
  if (!made.ok()) env_->RemoveAll(tmp).IgnoreError();  // retired: nothing committed lives there
  return made;
}

void SlotPool::GiveBack(std::unique_ptr<StepSlot> slot) {
  if (!slot) return;
  MutexLock l(&mu_);
  if (!free_) {
    free_ = std::move(slot);
    return;
  }
  Discard(std::move(slot));
}

void SlotPool::Committed(int64_t step, std::unique_ptr<StepSlot> slot) {
  MutexLock l(&mu_);
  if (Holds()) held_[step] = std::move(slot);
  // else: unmapped here; the files are the step's, the directory another's
}

StatusOr<bool> SlotPool::TakeRetired(int64_t step) {
  std::unique_ptr<StepSlot> slot;
  {
    MutexLock l(&mu_);
    auto it = held_.find(step);
    if (it == held_.end()) return false;
    slot = std::move(it->second);
    held_.erase(it);
    if (free_) return false;  // `slot` is unmapped on return; the caller removes the step
  }
  if (!slot->Intact(env_)) return false;
  const std::string tmp = JoinPath(dir_, TempDirName(step));
  // A step being read is removed as usual instead (its readers keep their pages).
  STRATA_ASSIGN_OR_RETURN(bool renamed,
                          RenameUnlessRead(env_, JoinPath(dir_, StepDirName(step)), tmp));
  if (!renamed) return false;
  CrashPoint("retention.after_rename");
  slot->Moved(tmp);
  MutexLock l(&mu_);
  if (free_) {
    Discard(std::move(slot));
  } else {
    free_ = std::move(slot);
  }
  return true;
}

Status SlotPool::Prepare(const StepInfo& layout) {
  STRATA_ASSIGN_OR_RETURN(auto steps, ListSteps(dir_, env_));
  std::unique_ptr<StepSlot> slot;
  {
    MutexLock l(&mu_);
    if (free_ && free_->Fits(layout)) return Status::Ok();
    // The next save will take the files of the step retention retires.
    const bool recycles = options_.recycle_space && options_.max_to_keep >= 2 &&
                          steps.size() >= static_cast<size_t>(options_.max_to_keep);
    auto oldest = steps.empty() ? held_.end() : held_.find(steps.front());
    if (!free_ && recycles && oldest != held_.end() && oldest->second->Fits(layout)) {
      return Status::Ok();
    }
    slot = std::move(free_);
  }
  std::string dir = slot ? slot->dir() : JoinPath(dir_, TempDirName(0));
  slot.reset();
  auto made = Make(dir, layout);
  if (!made.ok()) {
    env_->RemoveAll(dir).IgnoreError();
    return made.status();
  }
  GiveBack(std::move(*made));
  return Status::Ok();
}

std::optional<HeldRegion> SlotPool::Held(int64_t step, const StepInfo& info) const {
  MutexLock l(&mu_);
  auto it = held_.find(step);
  if (it == held_.end() || !it->second->Fits(info) || !it->second->Intact(env_)) {
    return std::nullopt;
  }
  return HeldRegion{it->second->region(), it->second->file_offsets()};
}

bool SlotPool::NeedsSpare(size_t committed) const {
  MutexLock l(&mu_);
  if (free_) return false;
  const bool recycles = options_.recycle_space && options_.max_to_keep >= 2 &&
                        committed >= static_cast<size_t>(options_.max_to_keep);
  return !recycles;
}

SlotStatus SlotPool::status() const {
  MutexLock l(&mu_);
  SlotStatus s;
  s.pinned = true;
  auto add = [&](const StepSlot& slot) {
    s.mapped_bytes += slot.bytes();
    s.pinned = s.pinned && slot.registered();
    ++s.slots;
  };
  if (free_) add(*free_);
  for (const auto& [step, slot] : held_) add(*slot);
  if (s.slots == 0) s.pinned = false;
  return s;
}

}  // namespace strata
