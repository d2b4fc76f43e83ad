// Copyright 2026 The Strata Authors.
//
// CRC-32C (Castagnoli), the checksum S3 verifies for x-amz-checksum-crc32c.
// Uses the SSE 4.2 crc32 instruction when the CPU has it (several GB/s),
// a table otherwise. Debian 12 packages no CRC32C library.
#ifndef STRATA_STORAGE_CRC32C_H_
#define STRATA_STORAGE_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::storage {

// Extends `crc` (0 for a new checksum) with `n` bytes.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// The base64 of the big-endian CRC, as S3's checksum headers carry it.
std::string Crc32cBase64(uint32_t crc);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_CRC32C_H_
