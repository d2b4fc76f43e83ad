// Copyright 2026 The Strata Authors.
//
// Bulk copies that bypass the cache. A snapshot copies hundreds of MB that
// the training loop will not read again: ordinary stores would first read
// every destination line (doubling memory traffic) and evict the trainer's
// working set from the L3 cache. Non-temporal stores do neither.
#ifndef STRATA_UTIL_COPY_H_
#define STRATA_UTIL_COPY_H_

#include <cstddef>

namespace strata {

// Copies n bytes like memcpy (the ranges must not overlap). Uses
// non-temporal stores for large copies on x86-64 and ends with a store fence,
// so the bytes are visible to other threads once a later release (e.g. a
// mutex unlock) is observed.
void CopyNonTemporal(void* dst, const void* src, size_t n);

}  // namespace strata

#endif  // STRATA_UTIL_COPY_H_
