// Copyright 2026 The Strata Authors.
//
// A file descriptor owner for the storage backends.
#ifndef STRATA_STORAGE_FD_H_
#define STRATA_STORAGE_FD_H_

#include <unistd.h>

#include <utility>

namespace strata::storage {

// Owns one file descriptor (or none: -1); closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: returns the descriptor and holds none.
  int Release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_FD_H_
