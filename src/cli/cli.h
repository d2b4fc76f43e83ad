// Copyright 2026 The Strata Authors.
//
// The `strata` command library. main() is a thin wrapper over RunCli(), and
// tests call RunCli() in-process with their own streams.
//
// Exit codes: 0 success; 1 the command ran and found a problem (a step that
// does not verify, an error); 2 bad usage.
#ifndef STRATA_CLI_CLI_H_
#define STRATA_CLI_CLI_H_

#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace strata::cli {

// `args` excludes the program name.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

int Main(int argc, char** argv);

// Where a subcommand writes, and the exit code it leaves.
struct Context {
  std::ostream& out;
  std::ostream& err;
  int exit_code = 0;
};

// Each group of commands registers its subcommands on the root app; the
// callbacks run after parsing and set ctx.exit_code.
void RegisterCatalogCommands(CLI::App& app, Context& ctx);
void RegisterAgentCommands(CLI::App& app, Context& ctx);
void RegisterBackupCommands(CLI::App& app, Context& ctx);
void RegisterRunCommand(CLI::App& app, Context& ctx);
void RegisterMaintenanceCommands(CLI::App& app, Context& ctx);
void RegisterPlanCommand(CLI::App& app, Context& ctx);
void RegisterGoodputCommand(CLI::App& app, Context& ctx);
void RegisterSecretCommands(CLI::App& app, Context& ctx);

// "64.0 MiB"
std::string HumanBytes(uint64_t bytes);

}  // namespace strata::cli

#endif  // STRATA_CLI_CLI_H_
