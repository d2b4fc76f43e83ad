// Copyright 2026 The Strata Authors.
#include "util/file_util.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>

#include "util/crash_point.h"

namespace strata {

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  std::string out(a);
  if (out.back() != '/') out += '/';
  out += b;
  return out;
}

std::string Dirname(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  auto slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

Status CreateDirs(Env* env, const std::string& dir) {
  if (dir.empty() || dir == "/" || dir == "." || env->Exists(dir)) return Status::Ok();
  STRATA_RETURN_IF_ERROR(CreateDirs(env, Dirname(dir)));
  STRATA_RETURN_IF_ERROR(env->CreateDir(dir));
  return env->SyncDir(Dirname(dir));  // the new entry survives a power cut
}

Status CommitDir(Env* env, const std::string& tmp_dir, const std::string& final_dir) {
  STRATA_RETURN_IF_ERROR(env->SyncDir(tmp_dir));
  CrashPoint("commit.before_rename");
  STRATA_RETURN_IF_ERROR(env->Rename(tmp_dir, final_dir));
  CrashPoint("commit.after_rename");
  return env->SyncDir(Dirname(final_dir));
}

Status WriteFileSynced(Env* env, const std::string& path, std::string_view data) {
  STRATA_ASSIGN_OR_RETURN(auto file, env->CreateWritable(path));
  STRATA_RETURN_IF_ERROR(file->Truncate(0));
  STRATA_RETURN_IF_ERROR(file->PWrite(0, data.data(), data.size()));
  STRATA_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

namespace {

// 64 bits from the kernel's generator (never blocks once it is seeded, at
// boot); the sequence number alone if it cannot say.
uint64_t RandomBits() {
  uint64_t bits = 0;
  if (::getrandom(&bits, sizeof bits, 0) != sizeof bits) bits = 0;
  return bits;
}

}  // namespace

std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> seq{0};
  std::string base = path.substr(path.rfind('/') + 1);  // whole path if no '/'
  char random[17];
  std::snprintf(random, sizeof random, "%016llx", static_cast<unsigned long long>(RandomBits()));
  return JoinPath(Dirname(path), ".strata-tmp-" + base + "-" + std::to_string(::getpid()) + "-" +
                                     std::to_string(seq.fetch_add(1)) + "-" + random);
}

StatusOr<UniqueFd> LockFileExclusive(const std::string& path, const std::string& busy,
                                     bool write_pid) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoToStatus(errno, "open lock file " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) return ErrnoToStatus(err, "lock " + path);
    char holder[32] = {0};
    const ssize_t n = ::pread(fd.get(), holder, sizeof holder - 1, 0);
    return FailedPreconditionError(busy + " (pid " +
                                   std::string(holder, n > 0 ? static_cast<size_t>(n) : 0) +
                                   " holds " + path + ")");
  }
  if (write_pid) {
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), pid.data(), pid.size(), 0) < 0) {
      // The pid is informational only; the lock itself is held.
    }
  }
  return fd;
}

StatusOr<int> CreateExclusive(const std::string& path, unsigned mode, bool read_write) {
  const int flags = (read_write ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  const int fd = ::open(path.c_str(), flags, static_cast<mode_t>(mode));
  if (fd >= 0) return fd;
  if (errno == EEXIST) {
    return AlreadyExistsError("create " + path +
                              ": something is already there (a file, directory or link at a "
                              "name Strata was about to create is never written through)");
  }
  return ErrnoToStatus(errno, "create " + path);
}

Status CommitFile(Env* env, const std::string& tmp_file, const std::string& final_file) {
  CrashPoint("commit.before_rename");
  Status s = env->Rename(tmp_file, final_file);
  if (!s.ok()) {
    env->RemoveFile(tmp_file).IgnoreError();
    return s;
  }
  CrashPoint("commit.after_rename");
  return env->SyncDir(Dirname(final_file));
}

Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data) {
  std::string tmp = TempPathFor(path);
  Status s = WriteFileSynced(env, tmp, data);
  if (!s.ok()) {
    env->RemoveFile(tmp).IgnoreError();
    return s;
  }
  return CommitFile(env, tmp, path);
}

Status CommitFileAt(int dir_fd, int file_fd, const std::string& tmp_name,
                    const std::string& final_name) {
  Status s;
  if (::fsync(file_fd) != 0) s = ErrnoToStatus(errno, "fsync " + tmp_name);
  if (::close(file_fd) != 0 && s.ok()) s = ErrnoToStatus(errno, "close " + tmp_name);
  CrashPoint("commit.before_rename");
  if (s.ok() && ::renameat(dir_fd, tmp_name.c_str(), dir_fd, final_name.c_str()) != 0) {
    s = ErrnoToStatus(errno, "rename " + tmp_name + " to " + final_name);
  }
  if (!s.ok()) {
    ::unlinkat(dir_fd, tmp_name.c_str(), 0);
    return s;
  }
  CrashPoint("commit.after_rename");
  if (::fsync(dir_fd) != 0) return ErrnoToStatus(errno, "fsync the directory of " + final_name);
  return Status::Ok();
}

StatusOr<std::string> ReadFileToString(Env* env, const std::string& path, uint64_t max_size) {
  STRATA_ASSIGN_OR_RETURN(auto file, env->OpenReadable(path));
  STRATA_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size > max_size) {
    return ResourceExhaustedError(path + ": " + std::to_string(size) + " bytes, more than the " +
                                  std::to_string(max_size) + " allowed");
  }
  std::string out(size, '\0');
  STRATA_RETURN_IF_ERROR(file->PRead(0, size, out.data()));
  return out;
}

unsigned long FilesystemType(const std::string& path) {
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) == 0 ? static_cast<unsigned long>(fs.f_type) : 0;
}

bool OnMemoryFilesystem(const std::string& path) {
  switch (FilesystemType(path)) {
    case TMPFS_MAGIC:
    case RAMFS_MAGIC:
    case HUGETLBFS_MAGIC:
      return true;
    default:
      return false;
  }
}

}  // namespace strata
