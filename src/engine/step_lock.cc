// Copyright 2026 The Strata Authors.
#include "engine/step_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace strata {
namespace {

StatusOr<UniqueFd> OpenDir(const std::string& step_dir) {
  UniqueFd fd(::open(step_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, "open step directory " + step_dir);
  return fd;
}

// flock(2), retried when a signal interrupts it; errno on failure.
int Flock(int fd, int operation) {
  int r;
  do {
    r = ::flock(fd, operation);
  } while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : errno;
}

// The file system has no flock: nobody can lock there.
bool Unsupported(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS; }

}  // namespace

StatusOr<StepLock> StepLock::ForReading(const std::string& step_dir) {
  STRATA_ASSIGN_OR_RETURN(UniqueFd opened, OpenDir(step_dir));
  const int fd = opened.get();
  StepLock lock(std::move(opened));
  const int err = Flock(fd, LOCK_SH);
  if (Unsupported(err)) return StepLock();
  if (err != 0) return ErrnoToStatus(err, "lock step directory " + step_dir + " for reading");
  // A save that held the lock when it was asked for renamed the directory
  // away meanwhile: what is at the path now, if anything, is another.
  struct stat held, now;
  if (::fstat(fd, &held) != 0) return ErrnoToStatus(errno, "stat step directory " + step_dir);
  const bool there = ::stat(step_dir.c_str(), &now) == 0;
  if (!there && errno != ENOENT) return ErrnoToStatus(errno, "stat step directory " + step_dir);
  if (!there || now.st_dev != held.st_dev || now.st_ino != held.st_ino) {
    return NotFoundError(step_dir + " was taken by a save (its files recycled) as it was opened");
  }
  return lock;
}

StatusOr<std::optional<StepLock>> StepLock::ForRecycling(const std::string& step_dir) {
  STRATA_ASSIGN_OR_RETURN(UniqueFd opened, OpenDir(step_dir));
  const int fd = opened.get();
  StepLock lock(std::move(opened));
  const int err = Flock(fd, LOCK_EX | LOCK_NB);
  if (err == EWOULDBLOCK) return std::optional<StepLock>();
  if (Unsupported(err)) return std::optional<StepLock>(StepLock());
  if (err != 0) return ErrnoToStatus(err, "lock step directory " + step_dir + " for recycling");
  return std::optional<StepLock>(std::move(lock));
}

StatusOr<bool> RenameUnlessRead(Env* env, const std::string& step_dir, const std::string& to) {
  STRATA_ASSIGN_OR_RETURN(auto lock, StepLock::ForRecycling(step_dir));
  if (!lock) return false;
  STRATA_RETURN_IF_ERROR(env->Rename(step_dir, to));
  return true;  // the lock goes: a reader that opened the step before is told it is gone
}

}  // namespace strata
