// Copyright 2026 The Strata Authors.
#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

namespace strata::cli {

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app("strata: multi-tier checkpointing for long-running training jobs", "strata");
  app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION);
  app.require_subcommand(1);
  Context ctx{out, err};
  RegisterCatalogCommands(app, ctx);
  RegisterAgentCommands(app, ctx);
  RegisterBackupCommands(app, ctx);
  RegisterRunCommand(app, ctx);
  RegisterMaintenanceCommands(app, ctx);
  RegisterPlanCommand(app, ctx);
  RegisterGoodputCommand(app, ctx);
  RegisterSecretCommands(app, ctx);

  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    const auto subs = app.get_subcommands();
    out << (subs.empty() ? app.help() : subs.back()->help());
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    out << app.version() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "strata: " << e.what() << "\n";
    err << "Run 'strata --help' for usage.\n";
    return 2;
  }
  return ctx.exit_code;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return RunCli(args, std::cout, std::cerr);
}

}  // namespace strata::cli
