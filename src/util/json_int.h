// Copyright 2026 The Strata Authors.
//
// Integers read from JSON without conversion. nlohmann's get<T>() converts
// any number: a float by static_cast (undefined behaviour when out of T's
// range, as a fuzzer found with "size": 4.4e53), a negative number into an
// unsigned type by wrapping, a 64-bit value into int by truncation.
// GetInt<T> accepts only an integer that T holds and otherwise throws
// nlohmann's json::type_error or json::out_of_range, so the callers' existing
// `catch (const json::exception&)` names the document as malformed.
#ifndef STRATA_UTIL_JSON_INT_H_
#define STRATA_UTIL_JSON_INT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace strata {

template <typename T>
T GetInt(const nlohmann::json& j) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (std::in_range<T>(v)) return static_cast<T>(v);
  } else if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (std::in_range<T>(v)) return static_cast<T>(v);
  } else {
    throw nlohmann::json::type_error::create(
        302, "an integer is required, not " + std::string(j.type_name()), &j);
  }
  throw nlohmann::json::out_of_range::create(406, "integer " + j.dump() + " is out of range", &j);
}

// An array of integers, each read as GetInt<T>.
template <typename T>
std::vector<T> GetInts(const nlohmann::json& j) {
  if (!j.is_array()) {
    throw nlohmann::json::type_error::create(
        302, "an array is required, not " + std::string(j.type_name()), &j);
  }
  std::vector<T> out;
  out.reserve(j.size());
  for (const nlohmann::json& v : j) out.push_back(GetInt<T>(v));
  return out;
}

}  // namespace strata

#endif  // STRATA_UTIL_JSON_INT_H_
