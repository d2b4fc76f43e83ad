// Copyright 2026 The Strata Authors.
//
// The manifest codec. A manifest file is a 32-byte header followed by a JSON
// body (docs/format.md):
//
//   offset size
//   0      8    magic "STRATAMF"
//   8      4    format version, little-endian (currently 1)
//   12     4    flags, must be 0
//   16     8    body size in bytes, little-endian
//   24     8    XXH3-64 of the body, little-endian
//   32     n    body: UTF-8 JSON
//
// Decoding never trusts the input: every size, index and offset is checked
// (with overflow checks) before use, and every failure is an error naming
// the source and the field, never a crash.
#ifndef STRATA_FORMAT_MANIFEST_H_
#define STRATA_FORMAT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "strata/catalog.h"
#include "strata/status.h"

namespace strata {

inline constexpr std::string_view kManifestMagic = "STRATAMF";
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kManifestHeaderSize = 32;
inline constexpr uint64_t kMaxManifestBytes = 256ull << 20;
inline constexpr uint64_t kMinChunkSize = 4096;
inline constexpr uint64_t kMaxChunkSize = 1ull << 30;
inline constexpr size_t kMaxRank = 64;

std::string EncodeManifest(const StepInfo& info);

// `source` (usually the manifest's path) prefixes every error message.
// Errors are DATA_LOSS, except a newer format version (FAILED_PRECONDITION).
StatusOr<StepInfo> DecodeManifest(std::string_view bytes, std::string_view source);

// Number of chunk checksums an item of `nbytes` has.
uint64_t ChunkCount(uint64_t nbytes, uint64_t chunk_size);

// product(shape) * DTypeSize(dtype), or INVALID_ARGUMENT on a negative
// dimension, too many dimensions or overflow.
StatusOr<uint64_t> ShapeBytes(DType dtype, const std::vector<int64_t>& shape);

// "[1024, 16]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace strata

#endif  // STRATA_FORMAT_MANIFEST_H_
