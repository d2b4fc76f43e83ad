// Copyright 2026 The Strata Authors.
#include "util/time_format.h"

#include <chrono>
#include <ctime>

namespace strata {

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Rfc3339(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[40];
  return std::string(buf, std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm));
}

}  // namespace strata
