// Copyright 2026 The Strata Authors.
//
// FaultInjectionEnv: an Env that fails a chosen operation on its n-th call
// with a chosen errno, to reach error paths deterministically; and that
// models a power cut, as RocksDB's FaultInjectionTestFS does: it tracks what
// the calls made through it have not made durable yet, and
// DropUnsyncedData() leaves the disk as a power cut would:
//   - a file written since its last Sync is cut to the size it had then
//     (0 if it was created and never synced);
//   - a directory entry created (a file, a directory, a rename's target)
//     since its directory's last SyncDir is removed;
//   - a file a rename replaced since then gets its old contents back.
// Not modelled: unsynced overwrites inside the synced size, and entries
// removed or renamed away coming back. Files written around the Env (by a
// client, by a socket) count as durable.
#ifndef STRATA_TESTS_HARNESS_FAULT_ENV_H_
#define STRATA_TESTS_HARNESS_FAULT_ENV_H_

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "strata/env.h"
#include "util/file_util.h"

namespace strata::testing {

enum class Op { kWrite, kTruncate, kSync, kRename, kSyncDir, kCreateDir, kOpenWritable };

class FaultInjectionEnv : public EnvWrapper {
 public:
  FaultInjectionEnv() : EnvWrapper(Env::Default()) {}

  // The n-th call (1-based, counted from now) of `op` fails with `err`;
  // every later call fails too if `sticky`.
  void FailAt(Op op, int n, int err, bool sticky = false) {
    std::lock_guard<std::mutex> l(mu_);
    rules_[op] = Rule{n, err, sticky, 0};
  }
  // The power goes out after `n` more changing calls (writes, truncations,
  // syncs, renames, creations, removals): every later one fails with EIO,
  // as if the machine had stopped. DropUnsyncedData then shows what the
  // disk holds.
  void CutPowerAfter(int n) {
    std::lock_guard<std::mutex> l(mu_);
    power_left_ = n;
  }
  bool power_cut() {
    std::lock_guard<std::mutex> l(mu_);
    return power_left_ == 0;
  }
  void Clear() {
    std::lock_guard<std::mutex> l(mu_);
    rules_.clear();
  }
  // Returns a non-OK status if this call of `op` should fail.
  Status Check(Op op, const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    STRATA_RETURN_IF_ERROR(UsePowerLocked(what));
    auto it = rules_.find(op);
    if (it == rules_.end()) return Status::Ok();
    Rule& r = it->second;
    ++r.calls;
    if (r.calls == r.n || (r.sticky && r.calls > r.n)) {
      return ErrnoToStatus(r.err, "injected fault: " + what);
    }
    return Status::Ok();
  }

  StatusOr<std::unique_ptr<WritableFile>> OpenWritable(const std::string& p) override;
  // The same faults as OpenWritable (Op::kOpenWritable), for a new file.
  StatusOr<std::unique_ptr<WritableFile>> CreateWritable(const std::string& p) override {
    return Open(p, /*create=*/true);
  }
  Status Rename(const std::string& a, const std::string& b) override {
    STRATA_RETURN_IF_ERROR(Check(Op::kRename, "rename " + a));
    std::lock_guard<std::mutex> l(mu_);
    Entry moved = TakeEntryLocked(a);  // a's own state moves with it
    // What b is after a power cut depends on b's past, not a's: a new name
    // goes, a name that was there gets its contents back.
    if (!target()->Exists(b)) {
      moved.created = true;  // b is a new name until its directory is synced
    } else if (auto old = entries_.find(b); old != entries_.end()) {
      moved.created = old->second.created;
      moved.old_contents = old->second.old_contents;
    } else {
      moved.created = false;
      auto contents = ReadFileToString(target(), b, kMaxRemembered);
      if (contents.ok()) moved.old_contents = std::move(*contents);
    }
    STRATA_RETURN_IF_ERROR(target()->Rename(a, b));
    entries_[b] = std::move(moved);
    if (auto f = files_.find(a); f != files_.end()) {
      files_[b] = f->second;
      files_.erase(f);
    }
    return Status::Ok();
  }
  Status SyncDir(const std::string& p) override {
    STRATA_RETURN_IF_ERROR(Check(Op::kSyncDir, "fsync directory " + p));
    STRATA_RETURN_IF_ERROR(target()->SyncDir(p));
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = Dirname(it->first) == p ? entries_.erase(it) : std::next(it);
    }
    return Status::Ok();
  }
  Status CreateDir(const std::string& p) override {
    STRATA_RETURN_IF_ERROR(Check(Op::kCreateDir, "mkdir " + p));
    const bool existed = target()->Exists(p);
    STRATA_RETURN_IF_ERROR(target()->CreateDir(p));
    std::lock_guard<std::mutex> l(mu_);
    if (!existed) entries_[p].created = true;
    return Status::Ok();
  }
  Status RemoveFile(const std::string& p) override {
    STRATA_RETURN_IF_ERROR(UsePower("unlink " + p));
    STRATA_RETURN_IF_ERROR(target()->RemoveFile(p));
    ForgetUnder(p);
    return Status::Ok();
  }
  Status RemoveAll(const std::string& p) override {
    STRATA_RETURN_IF_ERROR(UsePower("remove " + p));
    STRATA_RETURN_IF_ERROR(target()->RemoveAll(p));
    ForgetUnder(p);
    return Status::Ok();
  }

  // What the disk holds after a power cut now (see the file comment). The
  // tracking starts over.
  void DropUnsyncedData() {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [path, f] : files_) {
      if (f.dirty && target()->Exists(path)) ::truncate(path.c_str(), f.synced_size);
    }
    for (const auto& [path, e] : entries_) {
      if (e.created) {
        target()->RemoveAll(path).IgnoreError();
      } else if (e.old_contents) {  // files are only ever created new: replace it
        target()->RemoveAll(path).IgnoreError();
        WriteFileSynced(target(), path, *e.old_contents).IgnoreError();
      }
    }
    files_.clear();
    entries_.clear();
  }

  // Called by the files this Env opened.
  void Wrote(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    files_[path].dirty = true;
  }
  void Synced(const std::string& path) {
    struct stat st;
    std::lock_guard<std::mutex> l(mu_);
    FileState& f = files_[path];
    f.dirty = false;
    f.synced_size = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }
  Status UsePower(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    return UsePowerLocked(what);
  }

 private:
  StatusOr<std::unique_ptr<WritableFile>> Open(const std::string& p, bool create);
  static constexpr uint64_t kMaxRemembered = 64 << 20;
  struct Rule {
    int n;
    int err;
    bool sticky;
    int calls;
  };
  struct FileState {
    uint64_t synced_size = 0;
    bool dirty = false;
  };
  struct Entry {
    bool created = false;                     // gone after a power cut
    std::optional<std::string> old_contents;  // back after a power cut
  };

  Status UsePowerLocked(const std::string& what) {
    if (power_left_ == 0) return ErrnoToStatus(EIO, "power cut: " + what);
    if (power_left_ > 0) --power_left_;
    return Status::Ok();
  }
  Entry TakeEntryLocked(const std::string& path) {
    auto it = entries_.find(path);
    if (it == entries_.end()) return Entry{};
    Entry e = std::move(it->second);
    entries_.erase(it);
    return e;
  }
  void ForgetUnder(const std::string& p) {
    std::lock_guard<std::mutex> l(mu_);
    auto under = [&p](const std::string& path) { return path == p || path.starts_with(p + "/"); };
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = under(it->first) ? entries_.erase(it) : std::next(it);
    }
    for (auto it = files_.begin(); it != files_.end();) {
      it = under(it->first) ? files_.erase(it) : std::next(it);
    }
  }

  std::mutex mu_;
  std::map<Op, Rule> rules_;
  int power_left_ = -1;  // changing calls until the power cut; -1: never
  std::map<std::string, FileState> files_;
  std::map<std::string, Entry> entries_;
};

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> f)
      : env_(env), path_(std::move(path)), f_(std::move(f)) {}
  Status PWrite(uint64_t off, const void* d, size_t n) override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kWrite, "write " + path_));
    env_->Wrote(path_);
    return f_->PWrite(off, d, n);
  }
  Status Truncate(uint64_t size) override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kTruncate, "truncate " + path_));
    env_->Wrote(path_);
    return f_->Truncate(size);
  }
  // Giving the file its storage is a write (unsynced until Sync()).
  Status Allocate(uint64_t size) override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kWrite, "allocate " + path_));
    env_->Wrote(path_);
    return f_->Allocate(size);
  }
  Status Sync() override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kSync, "fsync " + path_));
    STRATA_RETURN_IF_ERROR(f_->Sync());
    env_->Synced(path_);
    return Status::Ok();
  }
  Status Close() override { return f_->Close(); }
  // Stores through the mapping are writes: unsynced until Sync().
  StatusOr<std::byte*> MapShared(uint64_t size, void* at) override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kWrite, "map " + path_));
    env_->Wrote(path_);
    return f_->MapShared(size, at);
  }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> f_;
};

inline StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::OpenWritable(
    const std::string& p) {
  return Open(p, /*create=*/false);
}

inline StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::Open(const std::string& p,
                                                                       bool create) {
  STRATA_RETURN_IF_ERROR(Check(Op::kOpenWritable, "open " + p));
  const bool existed = target()->Exists(p);
  STRATA_ASSIGN_OR_RETURN(auto f, create ? target()->CreateWritable(p) : target()->OpenWritable(p));
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!existed) entries_[p].created = true;
    if (!files_.count(p)) {
      struct stat st;
      files_[p].synced_size =
          existed && ::stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    }
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, p, std::move(f)));
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_FAULT_ENV_H_
