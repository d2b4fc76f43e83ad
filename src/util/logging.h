// Copyright 2026 The Strata Authors.
//
// The library's logger: spdlog, named "strata", to stderr. The level comes
// from STRATA_LOG_LEVEL (trace, debug, info, warn, error, off; default info).
#ifndef STRATA_UTIL_LOGGING_H_
#define STRATA_UTIL_LOGGING_H_

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>

#include "util/mutex.h"

namespace strata {

// Never null. Thread-safe.
spdlog::logger* Log();

// Sets the level by name; false if the name is unknown.
bool SetLogLevel(const std::string& level);

// For events that may come thousands of times a second (refused
// connections): Add() each one; Due() says when to log them as one line.
// Thread-safe.
class LogLimiter {
 public:
  void Add();
  // True for the first event, then at most once every `every`; *count is
  // how many events came since the last true. False while none came.
  bool Due(std::chrono::steady_clock::duration every, uint64_t* count);

 private:
  Mutex mu_;
  uint64_t events_ GUARDED_BY(mu_) = 0;
  uint64_t logged_ GUARDED_BY(mu_) = 0;  // events_ at the last line
  std::chrono::steady_clock::time_point logged_at_ GUARDED_BY(mu_){};
};

}  // namespace strata

#endif  // STRATA_UTIL_LOGGING_H_
