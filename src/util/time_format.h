// Copyright 2026 The Strata Authors.
//
// Wall-clock times as text.
#ifndef STRATA_UTIL_TIME_FORMAT_H_
#define STRATA_UTIL_TIME_FORMAT_H_

#include <cstdint>
#include <string>

namespace strata {

// Milliseconds since the Unix epoch, now.
int64_t UnixMillisNow();
// RFC 3339 in UTC, whole seconds: "2026-11-21T10:15:02Z".
std::string Rfc3339(int64_t unix_ms);

}  // namespace strata

#endif  // STRATA_UTIL_TIME_FORMAT_H_
