// Copyright 2026 The Strata Authors.
//
// UniqueFd: the one owner of a file descriptor. Every descriptor the code
// opens and keeps past a statement (a lock, a socket being set up, a file
// being copied) is held in one, so that no early return leaks it. Where
// close(2)'s own error matters (a file written and not yet synced), the
// owner calls Release() and closes it itself.
#ifndef STRATA_UTIL_UNIQUE_FD_H_
#define STRATA_UTIL_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace strata {

// Owns one file descriptor (or none: -1); closes it on destruction. Closing
// a descriptor releases the flock(2) locks taken through it.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: returns the descriptor and holds none.
  int Release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held, if any (close(2)'s error is not reported).
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace strata

#endif  // STRATA_UTIL_UNIQUE_FD_H_
