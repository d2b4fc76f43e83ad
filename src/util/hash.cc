// Copyright 2026 The Strata Authors.
#include "util/hash.h"

#include <xxhash.h>

#include <cstring>

namespace strata {

#if defined(STRATA_HAVE_XXH3_AVX2)
namespace internal {
uint64_t Xxh3Avx2(const void* data, size_t n);
}  // namespace internal

namespace {
using HashFn = uint64_t (*)(const void*, size_t);
uint64_t Xxh3Baseline(const void* data, size_t n) { return XXH3_64bits(data, n); }
HashFn PickXxh3() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? internal::Xxh3Avx2 : Xxh3Baseline;
}
}  // namespace

uint64_t Xxh3(const void* data, size_t n) {
  static const HashFn fn = PickXxh3();
  return fn(data, n);
}
#else
uint64_t Xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }
#endif

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Stream::Update(const void* data, size_t n) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}

void Xxh3Stream::UpdateU64(uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  Update(b, sizeof b);
}

uint64_t Xxh3Stream::Digest() const {
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_));
}

std::string Hex64(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return s;
}

std::optional<uint64_t> ParseHex64(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace strata
