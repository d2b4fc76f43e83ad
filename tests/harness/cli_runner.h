// Copyright 2026 The Strata Authors.
//
// Runs a `strata` command line in process (RunCli) and captures what it
// printed, for the CLI tests.
#ifndef STRATA_TESTS_HARNESS_CLI_RUNNER_H_
#define STRATA_TESTS_HARNESS_CLI_RUNNER_H_

#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace strata::cli {

struct CliResult {
  int code;
  std::string out, err;
};

// `args` excludes the program name.
inline CliResult Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace strata::cli

#endif  // STRATA_TESTS_HARNESS_CLI_RUNNER_H_
