// Copyright 2026 The Strata Authors.
//
// A Checkpointer's side of the node agent's sync map (format/sync_map.h):
// the job-wide on-demand step. Attached when the checkpoint directory is
// managed by an agent. Then a maintenance notice, here or anywhere in the
// job, makes this process save the step the agent publishes — the same step
// on every rank — instead of its own next step.
//
// If a notice arrives here and no sync step follows within `sync_timeout`
// (no agent, or it cannot reach its coordinator), the process saves its next
// step on its own: a checkpoint of one node is better than none.
#ifndef STRATA_ENGINE_AGENT_SYNC_H_
#define STRATA_ENGINE_AGENT_SYNC_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "format/sync_map.h"
#include "util/mutex.h"

namespace strata {

class AgentSync {
 public:
  // Attaches to `<agent_dir>/sync.map`; nullptr (not an error) when there is
  // none. `served_notices` is the Checkpointer's count of notices answered;
  // it must outlive the returned object.
  static StatusOr<std::unique_ptr<AgentSync>> Attach(const std::string& agent_dir,
                                                     std::chrono::milliseconds sync_timeout,
                                                     const std::atomic<uint64_t>* served_notices);
  ~AgentSync();  // releases the slot

  // Called on every ShouldSave: publishes `step` and says whether an
  // on-demand save is due at it (the job's sync step is reached, or a local
  // notice waited too long for one). Atomic loads and stores only.
  bool Due(int64_t step) const noexcept;
  // The generation of a published sync step that is due at `step` (at or
  // past it, not yet served, not older than this process's first step or
  // its last on-demand save), 0 if none.
  uint64_t SyncDue(int64_t step) const noexcept;
  // After the on-demand save of `step` committed; `generation` is what
  // SyncDue returned when the save was decided (0: a local fallback).
  void Served(int64_t step, uint64_t generation);

  // A Save() returned after blocking its caller for `stall`.
  void SaveStalled(std::chrono::microseconds stall) noexcept {
    slot_.save_stall_us.fetch_add(stall.count(), std::memory_order_relaxed);
    slot_.saves.fetch_add(1, std::memory_order_relaxed);
  }

  // The host memory its saves stage in, for the agent's metrics.
  void Staging(uint64_t bytes, bool pinned) noexcept {
    slot_.staging.store(static_cast<int64_t>(bytes) | (pinned ? kStagingPinned : 0),
                        std::memory_order_relaxed);
  }

  std::optional<int64_t> PendingSyncStep() const;
  // When the job's notice arrived (Unix ms), 0 if unknown.
  int64_t NoticeUnixMs() const { return map_.header().notice_unix_ms.load(); }
  const std::string& path() const { return map_.path(); }

 private:
  AgentSync(SyncMap map, int slot, std::chrono::milliseconds timeout,
            const std::atomic<uint64_t>* served_notices);
  void WatchMain();

  SyncMap map_;
  const int slot_index_;
  SyncSlot& slot_;
  const std::chrono::milliseconds timeout_;
  const std::atomic<uint64_t>* const served_notices_;
  std::atomic<uint64_t> served_generation_;
  std::atomic<bool> fallback_due_{false};
  mutable std::atomic<int64_t> first_step_{-1};  // the first step ShouldSave saw

  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace strata

#endif  // STRATA_ENGINE_AGENT_SYNC_H_
