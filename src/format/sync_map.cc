// Copyright 2026 The Strata Authors.
#include "format/sync_map.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "util/file_util.h"
#include "util/process.h"
#include "util/unique_fd.h"

namespace strata {
namespace {

constexpr uint64_t kMagic = 0x50414d434e595353ull;  // "SSYNCMAP" little-endian
constexpr uint32_t kVersion = 1;

StatusOr<void*> MapFile(const std::string& path, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  if (static_cast<size_t>(st.st_size) != kSyncMapBytes) {
    return DataLossError(path + " is " + std::to_string(st.st_size) + " bytes, not a sync map");
  }
  void* p = ::mmap(nullptr, kSyncMapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoToStatus(errno, "mmap " + path);
  return p;
}

}  // namespace

bool ProcessAlive(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  // A zombie (exited, not yet reaped by its parent) is gone for our
  // purposes; an unreadable /proc/<pid>/stat (no /proc) trusts kill().
  const std::optional<char> state = ProcessState(pid);
  return state != 'Z' && state != 'X';
}

SyncMap::SyncMap(SyncMap&& o) noexcept : path_(std::move(o.path_)), base_(o.base_) {
  o.base_ = nullptr;
}

SyncMap& SyncMap::operator=(SyncMap&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, kSyncMapBytes);
    path_ = std::move(o.path_);
    base_ = o.base_;
    o.base_ = nullptr;
  }
  return *this;
}

SyncMap::~SyncMap() {
  if (base_ != nullptr) ::munmap(base_, kSyncMapBytes);
}

namespace {

// Opens the map at `path` without following a final symbolic link.
StatusOr<UniqueFd> OpenMapFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, "open sync map " + path);
  return fd;
}

// Makes the agent's map file `fd` mode 0660 with group `group`, through
// the descriptor (never by path: the name may be changed under us).
Status Restrict(int fd, gid_t group, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  if (st.st_gid != group && ::fchown(fd, static_cast<uid_t>(-1), group) != 0) {
    return ErrnoToStatus(errno, "give the sync map " + path + " to group " + std::to_string(group) +
                                    " (the local directory's)");
  }
  if ((st.st_mode & 07777) != 0660 && ::fchmod(fd, 0660) != 0) {
    return ErrnoToStatus(errno, "chmod 0660 " + path);
  }
  return Status::Ok();
}

// Whether the map file `fd` is this process's own, a regular file.
bool Owned(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
}

StatusOr<SyncMap> Validated(SyncMap map) {
  const SyncHeader& h = map.header();
  if (h.magic != kMagic || h.version != kVersion || h.slots != kSyncSlots) {
    return DataLossError(map.path() + " is not a version " + std::to_string(kVersion) +
                         " sync map");
  }
  return map;
}

}  // namespace

StatusOr<SyncMap> SyncMap::Open(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const UniqueFd fd, OpenMapFile(path));
  STRATA_ASSIGN_OR_RETURN(void* p, MapFile(path, fd.get()));
  return Validated(SyncMap(path, p));
}

// The agent's existing map, if it is the agent's own and valid; it is made
// 0660 with the job's group (a map of an older release was 0666).
StatusOr<SyncMap> SyncMap::OpenOwned(const std::string& path, gid_t group) {
  STRATA_ASSIGN_OR_RETURN(const UniqueFd fd, OpenMapFile(path));
  if (!Owned(fd.get())) return PermissionDeniedError(path + " belongs to another user");
  STRATA_RETURN_IF_ERROR(Restrict(fd.get(), group, path));
  STRATA_ASSIGN_OR_RETURN(void* p, MapFile(path, fd.get()));
  return Validated(SyncMap(path, p));
}

StatusOr<SyncMap> SyncMap::OpenOrCreate(const std::string& path, gid_t group) {
  auto existing = OpenOwned(path, group);
  if (existing.ok()) return existing;
  // A fresh map, published by the commit protocol: a reader never sees a
  // map without its header.
  alignas(SyncHeader) std::array<char, kSyncMapBytes> bytes{};
  auto* h = new (bytes.data()) SyncHeader();
  h->magic = kMagic;
  h->version = kVersion;
  h->slots = kSyncSlots;
  auto* slots = reinterpret_cast<SyncSlot*>(bytes.data() + sizeof(SyncHeader));
  for (int i = 0; i < kSyncSlots; ++i) new (&slots[i]) SyncSlot();
  Env* env = Env::Default();
  const std::string tmp = TempPathFor(path);
  STRATA_ASSIGN_OR_RETURN(int fd, CreateExclusive(tmp, 0600));
  // The ranks claim slots by writing: the job's group may, no one else.
  Status s = Restrict(fd, group, tmp);
  if (s.ok() && ::pwrite(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    s = ErrnoToStatus(errno, "write " + tmp);
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoToStatus(errno, "fsync " + tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoToStatus(errno, "close " + tmp);
  if (!s.ok()) {
    env->RemoveFile(tmp).IgnoreError();
    return s;
  }
  STRATA_RETURN_IF_ERROR(CommitFile(env, tmp, path));
  return OpenOwned(path, group);
}

StatusOr<int> SyncMap::Claim(int64_t pid) const {
  // Each claim gets a slot of its own (two Checkpointers in one process
  // are two ranks to the agent). The slot holds kClaiming while its fields
  // are reset, so the agent never pairs the new pid with old counters.
  for (int i = 0; i < kSyncSlots; ++i) {
    SyncSlot& s = slot(i);
    int64_t holder = s.pid.load();
    if (holder == kClaiming || (holder != 0 && ProcessAlive(holder))) continue;
    if (!s.pid.compare_exchange_strong(holder, kClaiming)) continue;
    s.current_step.store(-1);
    s.notices.store(0);
    s.saved_step.store(-1);
    s.served.store(0);
    s.save_stall_us.store(0);
    s.saves.store(0);
    s.staging.store(0);
    s.pid.store(pid);
    return i;
  }
  return ResourceExhaustedError("no free slot in " + path_ + " (" + std::to_string(kSyncSlots) +
                                " processes registered)");
}

void SyncMap::Release(int index) const {
  if (index < 0 || index >= kSyncSlots) return;
  slot(index).pid.store(0);
}

void SyncMap::Publish(int64_t step, int64_t notice_unix_ms) const {
  SyncHeader& h = header();
  h.sync_step.store(step, std::memory_order_relaxed);
  h.notice_unix_ms.store(notice_unix_ms, std::memory_order_relaxed);
  h.generation.fetch_add(1, std::memory_order_release);
}

}  // namespace strata
