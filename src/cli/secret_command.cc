// Copyright 2026 The Strata Authors.
//
// strata secret new: a job's secret worth the name (net/job_key.h).
#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "net/job_key.h"

namespace strata::cli {

void RegisterSecretCommands(CLI::App& app, Context& ctx) {
  CLI::App* secret = app.add_subcommand("secret", "The job's shared secret");
  secret->require_subcommand(1);
  CLI::App* made = secret->add_subcommand(
      "new",
      "Print a new secret: 32 random bytes, base64 (write it to the secret file, mode 0600, the "
      "same on every node of the job)");
  made->callback([&ctx] {
    StatusOr<std::string> s = net::NewSecret();
    if (!s.ok()) {
      ctx.err << "strata secret new: " << s.status().message() << "\n";
      ctx.exit_code = 1;
      return;
    }
    ctx.out << *s << "\n";
  });
}

}  // namespace strata::cli
