// Copyright 2026 The Strata Authors.
#include "engine/agent_sync.h"

#include <unistd.h>

#include "engine/preemption.h"
#include "util/file_util.h"
#include "util/logging.h"

namespace strata {

StatusOr<std::unique_ptr<AgentSync>> AgentSync::Attach(
    const std::string& agent_dir, std::chrono::milliseconds sync_timeout,
    const std::atomic<uint64_t>* served_notices) {
  std::string path = JoinPath(agent_dir, std::string(kSyncMapName));
  auto map = SyncMap::Open(path);
  if (!map.ok()) {
    if (map.status().code() == StatusCode::kNotFound) return std::unique_ptr<AgentSync>();
    return map.status().WithContext("attaching to the node agent");
  }
  STRATA_ASSIGN_OR_RETURN(int slot, map->Claim(::getpid()));
  auto sync = std::unique_ptr<AgentSync>(
      new AgentSync(std::move(*map), slot, sync_timeout, served_notices));
  MirrorNoticesTo(&sync->slot_.notices);
  Log()->info("on-demand steps are agreed through the node agent ({}, slot {})", sync->path(),
              slot);
  return sync;
}

AgentSync::AgentSync(SyncMap map, int slot, std::chrono::milliseconds timeout,
                     const std::atomic<uint64_t>* served_notices)
    : map_(std::move(map)),
      slot_index_(slot),
      slot_(map_.slot(slot)),
      timeout_(timeout),
      served_notices_(served_notices),
      served_generation_(0) {
  watcher_ = std::thread([this] { WatchMain(); });
}

AgentSync::~AgentSync() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  watcher_.join();
  MirrorNoticesTo(nullptr);
  map_.Release(slot_index_);
  map_.Leak();  // a handler that loaded the mirror just before may still store into it
}

uint64_t AgentSync::SyncDue(int64_t step) const noexcept {
  const SyncHeader& h = map_.header();
  uint64_t generation = h.generation.load(std::memory_order_acquire);
  if (generation == served_generation_.load(std::memory_order_relaxed)) return 0;
  int64_t sync = h.sync_step.load(std::memory_order_relaxed);
  if (sync == kNoSyncStep || step < sync) return 0;
  // A step for this process's predecessors, or one it saved already.
  if (sync < first_step_.load(std::memory_order_relaxed)) return 0;
  if (sync <= slot_.saved_step.load(std::memory_order_relaxed)) return 0;
  return generation;
}

bool AgentSync::Due(int64_t step) const noexcept {
  slot_.current_step.store(step, std::memory_order_relaxed);
  if (first_step_.load(std::memory_order_relaxed) < 0) {
    first_step_.store(step, std::memory_order_relaxed);
  }
  return SyncDue(step) != 0 || fallback_due_.load(std::memory_order_relaxed);
}

void AgentSync::Served(int64_t step, uint64_t generation) {
  const SyncHeader& h = map_.header();
  int64_t sync = h.sync_step.load(std::memory_order_relaxed);
  if (generation != 0 && sync != kNoSyncStep && step > sync) {
    Log()->warn(
        "missed the sync step {}: saved step {} instead (this rank was past it when {} "
        "published it)",
        sync, step, path());
  }
  if (generation != 0) served_generation_.store(generation, std::memory_order_relaxed);
  fallback_due_.store(false, std::memory_order_relaxed);
  slot_.saved_step.store(step, std::memory_order_relaxed);
  if (generation != 0) slot_.served.store(generation, std::memory_order_release);
}

std::optional<int64_t> AgentSync::PendingSyncStep() const {
  const SyncHeader& h = map_.header();
  if (h.generation.load(std::memory_order_acquire) == served_generation_.load()) {
    return std::nullopt;
  }
  int64_t sync = h.sync_step.load(std::memory_order_relaxed);
  if (sync == kNoSyncStep || sync < first_step_.load() || sync <= slot_.saved_step.load()) {
    return std::nullopt;  // not this process's to save
  }
  return sync;
}

// Starts the fallback clock when a local notice is pending and no sync step
// is, and raises fallback_due_ when it runs out.
void AgentSync::WatchMain() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point waiting_since{};  // epoch: not waiting
  MutexLock l(&mu_);
  for (;;) {
    if (!stop_) cv_.WaitFor(&mu_, std::chrono::milliseconds(50));
    if (stop_) break;
    bool notice = PreemptionNotices() != served_notices_->load(std::memory_order_relaxed);
    if (!notice || PendingSyncStep().has_value()) {
      waiting_since = Clock::time_point{};
      continue;
    }
    if (waiting_since == Clock::time_point{}) waiting_since = Clock::now();
    if (!fallback_due_.load() && Clock::now() - waiting_since >= timeout_) {
      Log()->warn(
          "no sync step from the node agent within {} ms of the notice ({}); saving "
          "this rank's next step on its own",
          timeout_.count(), path());
      fallback_due_.store(true, std::memory_order_relaxed);
    }
  }
}

}  // namespace strata
