// Copyright 2026 The Strata Authors.
//
// Fakes shared by the configuration tests: an environment and a
// file system held in maps.
#ifndef STRATA_TESTS_HARNESS_CONFIG_TEST_UTIL_H_
#define STRATA_TESTS_HARNESS_CONFIG_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config/config.h"
#include "test_util.h"  // ExpectError

namespace strata::testing {

using EnvVars = std::map<std::string, std::string>;
using Files = std::map<std::string, std::string>;

inline agent::GetenvFn FakeGetenv(EnvVars env) {
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

inline agent::ReadFileFn FakeReadFile(Files files) {
  return [files = std::move(files)](const std::string& path) -> StatusOr<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return NotFoundError(path + ": no such file");
    return it->second;
  };
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_CONFIG_TEST_UTIL_H_
