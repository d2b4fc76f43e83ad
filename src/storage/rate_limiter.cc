// Copyright 2026 The Strata Authors.
#include "storage/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace strata::storage {

RateLimiter::RateLimiter(uint64_t bytes_per_second, uint64_t burst)
    : rate_(static_cast<double>(bytes_per_second)),
      burst_(burst > 0 ? static_cast<double>(burst)
                       : std::max(static_cast<double>(bytes_per_second) / 10, 65536.0)),
      tokens_(burst_),
      last_(Clock::now()) {}

void RateLimiter::Acquire(uint64_t n) {
  auto need = std::min(static_cast<double>(n), burst_);
  std::chrono::duration<double> wait{0};
  {
    MutexLock lock(&mu_);
    Clock::time_point now = Clock::now();
    tokens_ =
        std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
    // Take the bytes now (possibly into debt) and sleep off the debt outside
    // the lock: concurrent callers queue up behind each other's debt.
    if (tokens_ < need) wait = std::chrono::duration<double>((need - tokens_) / rate_);
    tokens_ -= static_cast<double>(n);
  }
  if (wait.count() > 0) std::this_thread::sleep_for(wait);
}

}  // namespace strata::storage
