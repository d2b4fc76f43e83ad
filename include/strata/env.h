// Copyright 2026 The Strata Authors.
//
// Env: every file-system operation Strata performs goes through this
// interface, so tests can inject faults (a failing write, a full disk, a
// failing fsync) deterministically. Env::Default() is the POSIX
// implementation. Implementations must be thread-safe; file objects are used
// by one thread at a time.
#ifndef STRATA_ENV_H_
#define STRATA_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata {

// A file opened for writing at explicit offsets. PWrite may be called from
// several threads at once on one file; the other methods may not.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all `n` bytes at `offset` (retrying short writes).
  virtual Status PWrite(uint64_t offset, const void* data, size_t n) = 0;
  // Sets the file's size to exactly `size` bytes.
  virtual Status Truncate(uint64_t size) = 0;
  // Gives the file's first `size` bytes their storage now (fallocate), so
  // that writes into them, also through a mapping, cannot find the file
  // system full: RESOURCE_EXHAUSTED naming the file when it has no room
  // (a tmpfs then keeps nothing of it). Default: UNIMPLEMENTED (the caller
  // goes on without).
  virtual Status Allocate(uint64_t size);
  // Makes the written data durable (fdatasync), including what was stored
  // through a mapping (MapShared).
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  // Maps the file's first `size` bytes (the file must be at least that long)
  // shared and writable, so that stores to the memory are writes to the
  // file. `at` is nullptr (anywhere) or a page-aligned address inside a
  // range the caller reserved, which the mapping replaces (MAP_FIXED). The
  // mapping outlives this object; the caller unmaps it (munmap). Default:
  // UNIMPLEMENTED (the caller then writes with PWrite).
  virtual StatusOr<std::byte*> MapShared(uint64_t size, void* at);
};

// A file opened for reading at explicit offsets. Thread-safe.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads exactly `n` bytes at `offset`; a short file is DATA_LOSS.
  virtual Status PRead(uint64_t offset, size_t n, void* dst) const = 0;
  virtual StatusOr<uint64_t> Size() const = 0;
  // Maps the file's first `size` bytes (the file must be at least that
  // long) shared and read-only, at `at` (nullptr: anywhere; else a
  // page-aligned address inside a range the caller reserved, replaced as by
  // MAP_FIXED). The mapping outlives this object; the caller unmaps it.
  // Default: UNIMPLEMENTED (the caller then reads with PRead).
  virtual StatusOr<const std::byte*> MapShared(uint64_t size, void* at) const;
};

struct DirEntry {
  std::string name;
  enum class Type { kFile, kDirectory, kSymlink, kOther } type = Type::kOther;
};

// What tells a file's contents apart without reading them: a write, a
// truncation or a replacement of the file changes at least one field (for a
// write within the file system's timestamp granularity of the last look, see
// Store's seals). Comparable only on one machine between reboots.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never null; never deleted.
  static Env* Default();

  // Opens `path` for writing, creating it if needed. An existing file keeps
  // its contents (and its allocated space) until overwritten or truncated:
  // how a file of a retired step is reused, in a directory the writer alone
  // may change. A symbolic link at `path` is never followed (POSIX Env:
  // O_NOFOLLOW, ELOOP).
  virtual StatusOr<std::unique_ptr<WritableFile>> OpenWritable(const std::string& path) = 0;
  // Creates the new file `path` and opens it for writing: ALREADY_EXISTS if
  // anything is at `path`, a symbolic link included, which is never
  // followed (POSIX Env: O_CREAT|O_EXCL|O_NOFOLLOW). For temporary files,
  // whose names another user of a shared directory could plant first. The
  // default is OpenWritable, for Envs that cannot tell.
  virtual StatusOr<std::unique_ptr<WritableFile>> CreateWritable(const std::string& path) {
    return OpenWritable(path);
  }
  virtual StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) = 0;

  virtual Status CreateDir(const std::string& path) = 0;  // one level; OK if it exists
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status SyncDir(const std::string& path) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Removes a directory tree; does not follow symlinks. OK if missing.
  virtual Status RemoveAll(const std::string& path) = 0;
  // Entries of `path` without "." and "..", unsorted.
  virtual StatusOr<std::vector<DirEntry>> ListDir(const std::string& path) = 0;
  // True if `path` exists (without following a final symlink).
  virtual bool Exists(const std::string& path) = 0;
  // The identity of the regular file `path` (a final symlink is not
  // followed: FAILED_PRECONDITION, as for anything but a regular file).
  // UNIMPLEMENTED where the Env cannot tell; callers then read the bytes.
  virtual StatusOr<FileIdentity> Identify(const std::string& path);
};

// Forwards every call to a target Env; override what you want to change.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  StatusOr<std::unique_ptr<WritableFile>> OpenWritable(const std::string& p) override {
    return target_->OpenWritable(p);
  }
  StatusOr<std::unique_ptr<WritableFile>> CreateWritable(const std::string& p) override {
    return target_->CreateWritable(p);
  }
  StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& p) override {
    return target_->OpenReadable(p);
  }
  Status CreateDir(const std::string& p) override { return target_->CreateDir(p); }
  Status Rename(const std::string& a, const std::string& b) override {
    return target_->Rename(a, b);
  }
  Status SyncDir(const std::string& p) override { return target_->SyncDir(p); }
  Status RemoveFile(const std::string& p) override { return target_->RemoveFile(p); }
  Status RemoveAll(const std::string& p) override { return target_->RemoveAll(p); }
  StatusOr<std::vector<DirEntry>> ListDir(const std::string& p) override {
    return target_->ListDir(p);
  }
  bool Exists(const std::string& p) override { return target_->Exists(p); }
  StatusOr<FileIdentity> Identify(const std::string& p) override { return target_->Identify(p); }

 private:
  Env* target_;
};

}  // namespace strata

#endif  // STRATA_ENV_H_
