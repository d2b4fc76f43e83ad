// Copyright 2026 The Strata Authors.
#include "storage/retry.h"

#include <algorithm>
#include <random>

namespace strata::storage {

std::chrono::milliseconds BackoffDelay(int retry, std::chrono::milliseconds initial,
                                       std::chrono::milliseconds max) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  int doublings = std::clamp(retry - 1, 0, 30);
  long double cap = static_cast<long double>(initial.count()) * (1LL << doublings);
  auto ceiling = static_cast<int64_t>(std::min<long double>(cap, max.count()));
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(ceiling, 0));
  return std::chrono::milliseconds(pick(rng));
}

}  // namespace strata::storage
