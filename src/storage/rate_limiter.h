// Copyright 2026 The Strata Authors.
//
// A token bucket: callers take bytes at most `rate` per second on average,
// with bursts of up to `burst` bytes. Thread-safe: one limiter is shared by
// all of a store's uploads (StoreOptions::upload_bytes_per_second).
#ifndef STRATA_STORAGE_RATE_LIMITER_H_
#define STRATA_STORAGE_RATE_LIMITER_H_

#include <chrono>
#include <cstdint>

#include "util/mutex.h"

namespace strata::storage {

class RateLimiter {
 public:
  // REQUIRES: bytes_per_second > 0. burst 0 = a tenth of a second's worth
  // (at least 64 KiB).
  explicit RateLimiter(uint64_t bytes_per_second, uint64_t burst = 0);

  // Blocks until `n` bytes may be sent. Requests larger than the burst are
  // granted as soon as the bucket is full, then leave it in debt, so the
  // long-run rate still holds.
  void Acquire(uint64_t n);

 private:
  using Clock = std::chrono::steady_clock;
  const double rate_;   // bytes per second
  const double burst_;  // bucket capacity, bytes
  Mutex mu_;
  double tokens_ GUARDED_BY(mu_);  // may be negative (debt)
  Clock::time_point last_ GUARDED_BY(mu_);
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_RATE_LIMITER_H_
