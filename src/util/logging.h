// Copyright 2026 The Strata Authors.
//
// The library's logger: spdlog, named "strata", to stderr. The level comes
// from STRATA_LOG_LEVEL (trace, debug, info, warn, error, off; default info).
#ifndef STRATA_UTIL_LOGGING_H_
#define STRATA_UTIL_LOGGING_H_

#include <spdlog/spdlog.h>

namespace strata {

// Never null. Thread-safe.
spdlog::logger* Log();

// Sets the level by name; false if the name is unknown.
bool SetLogLevel(const std::string& level);

}  // namespace strata

#endif  // STRATA_UTIL_LOGGING_H_
