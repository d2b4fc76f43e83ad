// Copyright 2026 The Strata Authors.
//
// Exponential backoff with full jitter: the wait before retry n (1, 2, ...) is
// uniform in [0, min(max, initial * 2^(n-1))]. Randomising the whole wait
// spreads the retries of many clients hit by one outage (the "full jitter"
// scheme of the AWS Architecture Blog's "Exponential Backoff and Jitter").
#ifndef STRATA_STORAGE_RETRY_H_
#define STRATA_STORAGE_RETRY_H_

#include <chrono>

namespace strata::storage {

// The wait before retry `retry` (>= 1). Thread-safe.
std::chrono::milliseconds BackoffDelay(int retry, std::chrono::milliseconds initial,
                                       std::chrono::milliseconds max);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_RETRY_H_
