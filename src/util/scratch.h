// Copyright 2026 The Strata Authors.
//
// Scratch: a buffer for streaming `length` bytes through in blocks of at
// most `block`, as large as one such block (never empty), and left
// unfilled: no zeroing, and no page touched until used. A 4 MiB block
// zeroed for a chunk a fraction of that was most of a coded contribution's
// CPU (docs/performance.md, "Buffers sized to the chunk"). Callers write
// every byte before they read it.
#ifndef STRATA_UTIL_SCRATCH_H_
#define STRATA_UTIL_SCRATCH_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace strata {

template <typename T = char>
class Scratch {
 public:
  Scratch(uint64_t length, size_t block)
      : size_(static_cast<size_t>(std::max<uint64_t>(1, std::min<uint64_t>(block, length)))),
        data_(std::make_unique_for_overwrite<T[]>(size_)) {}

  T* get() const { return data_.get(); }
  size_t size() const { return size_; }  // the block each pass moves at most

 private:
  size_t size_;
  std::unique_ptr<T[]> data_;
};

}  // namespace strata

#endif  // STRATA_UTIL_SCRATCH_H_
