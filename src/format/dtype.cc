// Copyright 2026 The Strata Authors.
#include <array>
#include <utility>

#include "strata/types.h"

namespace strata {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeRow, 14> kDTypes = {{
    {DType::kBool, "bool", 1},
    {DType::kInt8, "int8", 1},
    {DType::kUInt8, "uint8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kUInt16, "uint16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kUInt32, "uint32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kUInt64, "uint64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
    {DType::kBytes, "bytes", 1},
}};

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const auto& row : kDTypes) {
    if (row.dtype == dtype) return row.name;
  }
  return "invalid";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& row : kDTypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

size_t DTypeSize(DType dtype) {
  for (const auto& row : kDTypes) {
    if (row.dtype == dtype) return row.size;
  }
  return 0;
}

}  // namespace strata
