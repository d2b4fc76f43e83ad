// Copyright 2026 The Strata Authors.
//
// strata run: the retry supervisor (src/supervisor/supervisor.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "supervisor/supervisor.h"
#include "wire/control.h"

namespace strata::cli {
namespace {

using supervisor::ParseDuration;
using supervisor::SupervisorOptions;

struct RunArgs {
  SupervisorOptions options;
  std::string agent;  // --agent HOST:PORT
  ClientAuth auth;    // --secret-file, --tls ...
  int max_restarts = -1;
  std::string backoff = "1s,5m";
  std::string grace = "300s";
  std::string reset_after = "10m";
};

// Fills the durations of `a.options`; false (with a message) on bad input.
bool ParseDurations(Context& ctx, RunArgs& a) {
  auto comma = a.backoff.find(',');
  auto min = ParseDuration(a.backoff.substr(0, comma));
  auto max = ParseDuration(comma == std::string::npos ? a.backoff : a.backoff.substr(comma + 1));
  auto grace = ParseDuration(a.grace);
  auto reset = ParseDuration(a.reset_after);
  for (const Status& s : {min.status(), max.status(), grace.status(), reset.status()}) {
    if (!s.ok()) {
      ctx.err << "strata run: " << s.message() << "\n";
      return false;
    }
  }
  if (*max < *min) {
    ctx.err << "strata run: --backoff " << a.backoff << ": MAX is below MIN\n";
    return false;
  }
  a.options.backoff_min = *min;
  a.options.backoff_max = *max;
  a.options.grace = *grace;
  a.options.reset_after = *reset;
  if (a.max_restarts >= 0) a.options.max_restarts = a.max_restarts;
  return true;
}

// Progress through the node agent: the newest step it ingested from this
// node since the job last started, the step that start restored, and
// quarantine by the coordinator. An agent that does not answer makes a
// run's progress unknown (not counted toward a crash loop).
supervisor::ProgressHooks AgentHooks(const std::string& agent, const ClientAuth& auth) {
  auto status = [agent, auth]() -> std::optional<wire::StatusReply> {
    auto r = AgentStatus(agent, auth, std::chrono::seconds(10), "strata run");
    if (!r.ok()) return std::nullopt;
    return std::move(*r);
  };
  supervisor::ProgressHooks h;
  h.newest = [status]() -> std::optional<int64_t> {  // -1: none since the start
    auto r = status();
    return r ? std::optional<int64_t>(r->newest_ingested) : std::nullopt;
  };
  h.restored = [status]() -> std::optional<int64_t> {
    auto r = status();
    return r && r->restored_step >= 0 ? std::optional<int64_t>(r->restored_step) : std::nullopt;
  };
  h.start = [status]() -> std::optional<int64_t> {  // this node's incarnation round
    auto r = status();
    return r && r->job ? std::optional<int64_t>(r->job->round) : std::nullopt;
  };
  h.quarantine = [agent, auth](int64_t step) -> StatusOr<std::string> {
    STRATA_ASSIGN_OR_RETURN(auto reply,
                            CallAgent(agent, auth, wire::QuarantineRequest{step}.ToJson(),
                                      std::chrono::seconds(30), "strata run"));
    STRATA_ASSIGN_OR_RETURN(wire::QuarantineStepReply answer,
                            wire::QuarantineStepReply::FromJson(reply));
    return answer.description;
  };
  return h;
}

// Each restart is reported to the agent (strata_supervisor_restarts_total);
// an agent that does not answer within 2 s (after connecting, 5 s at most)
// costs the count, not the restart.
std::function<void(std::string_view, int)> ReportRestarts(const std::string& agent,
                                                          const ClientAuth& auth,
                                                          std::ostream& log) {
  return [agent, auth, &log](std::string_view reason, int exit_code) {
    wire::SupervisorRestartRequest req{std::string(reason), exit_code};
    auto r = CallAgent(agent, auth, req.ToJson(), std::chrono::seconds(2), "strata run");
    if (!r.ok()) log << "strata run: the restart was not counted: " << r.status().message() << "\n";
  };
}

}  // namespace

void RegisterRunCommand(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run", fmt::format("Run a training command and restart it until it exits 0 (usage: strata "
                         "run [OPTIONS] -- CMD [ARGS...]). Exit codes: 0 the command finished; "
                         "the command's own code after a forwarded SIGTERM/SIGINT or when it "
                         "exits {} (do not restart); {} gave up; {} cannot start the command; "
                         "2 bad usage",
                         supervisor::kExitDoNotRestart, supervisor::kExitGaveUp,
                         supervisor::kExitCannotStart));
  run->add_option("--max-restarts", a->max_restarts,
                  "Give up after this many restarts (default: no limit; 0: never restart)")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--backoff", a->backoff,
                  "MIN,MAX wait between restarts: MIN doubling up to MAX, jittered into its "
                  "upper half; reset after progress or a long run")
      ->capture_default_str();
  run->add_option("--grace", a->grace,
                  "After forwarding SIGTERM/SIGINT to the command's process group, wait this long "
                  "before SIGKILL")
      ->capture_default_str();
  run->add_option("--reset-backoff-after", a->reset_after,
                  "A run at least this long resets the backoff to MIN")
      ->capture_default_str();
  run->add_option("--checkpoint-dir", a->options.checkpoint_dir,
                  "The command's Strata checkpoint directory: enables progress and crash-loop "
                  "detection (newest committed step before and after each run) and a lock "
                  "against a second supervisor. Without it only --max-restarts applies");
  run->add_option("--agent", a->agent,
                  "HOST:PORT of the node agent managing the command's checkpoint directory: "
                  "progress and crash-loop quarantine through it (instead of --checkpoint-dir)");
  AddClientAuthOptions(run, &a->auth);  // with --agent
  run->add_option("--crash-loop-runs", a->options.crash_loop_runs,
                  "Failed runs in a row without progress that make a crash loop: the newest step "
                  "(with --agent: the restored step) is quarantined (needs --checkpoint-dir or "
                  "--agent)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--max-quarantines", a->options.max_quarantines,
                  "Give up at a crash loop once this many steps were quarantined (counted "
                  "afresh once training passes the newest quarantined step)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("CMD", a->options.command, "The command and its arguments, after --")->required();
  run->callback([&ctx, a] {
    if (!ParseDurations(ctx, *a)) {
      ctx.exit_code = 2;
      return;
    }
    if (!a->agent.empty() && !a->options.checkpoint_dir.empty()) {
      ctx.err << "strata run: give --agent or --checkpoint-dir, not both\n";
      ctx.exit_code = 2;
      return;
    }
    if (!a->agent.empty()) {
      a->options.agent = AgentHooks(a->agent, a->auth);
      a->options.on_restart = ReportRestarts(a->agent, a->auth, ctx.err);
    }
    ctx.exit_code = supervisor::Supervise(a->options, ctx.err);
  });
}

}  // namespace strata::cli
