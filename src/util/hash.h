// Copyright 2026 The Strata Authors.
//
// XXH3-64 (libxxhash), the checksum of every byte Strata stores.
#ifndef STRATA_UTIL_HASH_H_
#define STRATA_UTIL_HASH_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

uint64_t Xxh3(const void* data, size_t n);

// Incremental XXH3-64 over a sequence of byte ranges.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  void UpdateU64(uint64_t v);  // little-endian
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t*
};

// 16 lowercase hex digits.
std::string Hex64(uint64_t v);
// Parses exactly 16 hex digits.
std::optional<uint64_t> ParseHex64(std::string_view s);

}  // namespace strata

#endif  // STRATA_UTIL_HASH_H_
