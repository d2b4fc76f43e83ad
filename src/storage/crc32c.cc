// Copyright 2026 The Strata Authors.
#include "storage/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata::storage {
namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t Crc32cTable(uint32_t crc, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(uint32_t crc, const unsigned char* p,
                                                       size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  auto p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HaveSse42()) return ~Crc32cSse42(crc, p, n);
#endif
  return ~Crc32cTable(crc, p, n);
}

std::string Crc32cBase64(uint32_t crc) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  unsigned char b[4] = {static_cast<unsigned char>(crc >> 24),
                        static_cast<unsigned char>(crc >> 16), static_cast<unsigned char>(crc >> 8),
                        static_cast<unsigned char>(crc)};
  std::string out;
  out += kAlphabet[b[0] >> 2];
  out += kAlphabet[((b[0] & 3) << 4) | (b[1] >> 4)];
  out += kAlphabet[((b[1] & 15) << 2) | (b[2] >> 6)];
  out += kAlphabet[b[2] & 63];
  out += kAlphabet[b[3] >> 2];
  out += kAlphabet[(b[3] & 3) << 4];
  out += "==";
  return out;
}

}  // namespace strata::storage
