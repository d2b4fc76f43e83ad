// Copyright 2026 The Strata Authors.
//
// Value types shared by the public API: element types and named buffers.
#ifndef STRATA_TYPES_H_
#define STRATA_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Element type of a tensor. The names ("float32", "bfloat16", ...) are the
// ones written to manifests and are stable.
enum class DType : uint8_t {
  kBool,
  kInt8,
  kUInt8,
  kInt16,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kBytes,  // opaque bytes; the shape is [nbytes]
};

std::string_view DTypeName(DType dtype);
std::optional<DType> ParseDType(std::string_view name);
// Size of one element in bytes (1 for kBytes and kBool).
size_t DTypeSize(DType dtype);

// A named, read-only buffer handed to Save(). The caller keeps `data` valid
// for the duration of the Save() call only: Save snapshots it.
struct Item {
  std::string name;  // unique within a step; no '/', no "..", no NUL, <= 1024 bytes
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;  // product(shape) * DTypeSize(dtype) == size
  const void* data = nullptr;
  size_t size = 0;  // bytes
};

// A named, writable buffer that Restore() fills in place.
struct MutableItem {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t size = 0;
};

}  // namespace strata

#endif  // STRATA_TYPES_H_
