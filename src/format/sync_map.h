// Copyright 2026 The Strata Authors.
//
// The sync map: a 4 KiB file, memory-mapped MAP_SHARED by the node agent and
// by every training process that checkpoints into the agent's local
// directory (`<local>/.strata-agent/sync.map`). It is how a job agrees on one
// on-demand step without a collective of its own and without a system call
// in the training loop:
//
//   * a process claims a slot (its pid) when its Checkpointer opens, stores
//     the step it is at on every ShouldSave() and, from its signal handler,
//     the number of maintenance notices it received;
//   * the agent reads the slots (who to signal, where training is, whether a
//     rank got a notice) and publishes the job's agreed sync step in the
//     header; the Checkpointer reads it with one atomic load per step.
//
// Every field is a lock-free 64-bit atomic, so a process-shared mapping is
// safe and the signal handler may write to it. Writers of the header:
// only the agent. Writers of a slot: its owner, except `pid`, which the
// agent clears for a process that died without releasing it.
//
// Contract of the sync step: the agent stores `sync_step` and then bumps
// `generation` (release); a reader loads `generation` (acquire) and then
// `sync_step`. A process saves an on-demand checkpoint at the first step
// >= sync_step of a generation it has not served. kNoSyncStep means none.
#ifndef STRATA_FORMAT_SYNC_MAP_H_
#define STRATA_FORMAT_SYNC_MAP_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata {

// The node agent's own directory inside the local directory, and the map in it.
inline constexpr std::string_view kAgentDirName = ".strata-agent";
inline constexpr std::string_view kSyncMapName = "sync.map";
inline constexpr int64_t kNoSyncStep = -1;
inline constexpr int kSyncSlots = 63;
// A slot's pid while a process is claiming it.
inline constexpr int64_t kClaiming = -1;

struct SyncSlot {
  std::atomic<int64_t> pid{0};            // 0: free
  std::atomic<int64_t> current_step{-1};  // the step of the last ShouldSave()
  std::atomic<uint64_t> notices{0};       // maintenance notices received
  std::atomic<int64_t> saved_step{-1};    // the newest on-demand step committed
  std::atomic<uint64_t> served{0};        // generation of that save
  // Its Save() calls: microseconds they blocked it, and how many (for the
  // agent's goodput). Zero from a library older than these fields.
  std::atomic<int64_t> save_stall_us{0};
  std::atomic<int64_t> saves{0};
  // Host memory its saves stage in (the step files it keeps mapped), with
  // kStagingPinned set when all of it is page-locked. Zero from a library
  // older than this field.
  std::atomic<int64_t> staging{0};
};
inline constexpr int64_t kStagingPinned = int64_t{1} << 62;

struct SyncHeader {
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t slots = 0;
  std::atomic<uint64_t> generation{0};  // bumped after sync_step changes
  std::atomic<int64_t> sync_step{kNoSyncStep};
  std::atomic<int64_t> notice_unix_ms{0};  // when the job's notice arrived
  std::atomic<int64_t> reserved[3];
};

static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(sizeof(SyncSlot) == 64 && sizeof(SyncHeader) == 64);
inline constexpr size_t kSyncMapBytes = sizeof(SyncHeader) + kSyncSlots * sizeof(SyncSlot);
static_assert(kSyncMapBytes == 4096);

// One mapping of a sync map file. Movable, not copyable; unmaps on
// destruction (the file stays).
class SyncMap {
 public:
  // The agent's: opens `path` if it holds a valid map this process owns (so
  // processes that mapped it before an agent restart keep talking to the
  // new agent), else creates it (temp file, then rename). Either way the
  // map is mode 0660 with group `group`, the job's (set through the
  // descriptor): the job's ranks may write it, no other user may. A map
  // another user owns is replaced, never used.
  static StatusOr<SyncMap> OpenOrCreate(const std::string& path, gid_t group);
  // A process's: opens an existing, valid map (a symbolic link at `path` is
  // not followed). NOT_FOUND if there is none.
  static StatusOr<SyncMap> Open(const std::string& path);

  SyncMap() = default;
  SyncMap(SyncMap&& o) noexcept;
  SyncMap& operator=(SyncMap&& o) noexcept;
  ~SyncMap();

  bool valid() const { return base_ != nullptr; }
  SyncHeader& header() const { return *reinterpret_cast<SyncHeader*>(base_); }
  SyncSlot& slot(int i) const {
    return reinterpret_cast<SyncSlot*>(static_cast<char*>(base_) + sizeof(SyncHeader))[i];
  }

  // Claims a free slot for `pid` (a slot whose process no longer exists
  // counts as free); RESOURCE_EXHAUSTED when all are taken. Returns its index.
  StatusOr<int> Claim(int64_t pid) const;
  void Release(int index) const;
  // Leaves the mapping in place for the rest of the process's life (a signal
  // handler may still be storing into it).
  void Leak() { base_ = nullptr; }

  // The agent's: publishes a new sync step (kNoSyncStep withdraws it).
  void Publish(int64_t step, int64_t notice_unix_ms) const;

  const std::string& path() const { return path_; }

 private:
  SyncMap(std::string path, void* base) : path_(std::move(path)), base_(base) {}
  static StatusOr<SyncMap> OpenOwned(const std::string& path, gid_t group);
  std::string path_;
  void* base_ = nullptr;
};

// True if a process with this pid exists (kill(pid, 0)) and is not a zombie.
bool ProcessAlive(int64_t pid);

}  // namespace strata

#endif  // STRATA_FORMAT_SYNC_MAP_H_
