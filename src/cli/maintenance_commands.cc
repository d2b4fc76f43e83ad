// Copyright 2026 The Strata Authors.
//
// strata maintenance: deliver a maintenance notice to a node as the platform
// does. strata health: the node's health in the platforms' one-line form.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "supervisor/supervisor.h"
#include "wire/control.h"
#include "wire/op.h"

namespace strata::cli {
namespace {

using json = nlohmann::json;

struct MaintenanceArgs {
  AgentAddress address;
  std::string grace = "300s";
  bool lose_ram = false;
  bool json = false;
};

void PrintEvent(Context& ctx, const std::string& at, const wire::MaintenanceEvent& e) {
  ctx.out << fmt::format("maintenance event at {} on the agent at {}\n", e.time, at);
  ctx.out << fmt::format(
      "  {} rank(s) got SIGTERM; they were gone after {:.2f} s{}\n", e.ranks,
      e.ranks_exited_seconds,
      e.ranks_killed > 0
          ? fmt::format(" ({} killed at the end of the grace period)", e.ranks_killed)
          : "");
  if (e.sync_step) {
    ctx.out << fmt::format("  on-demand step {}: {}{}\n", *e.sync_step,
                           e.saved ? "saved here" : "NOT saved here",
                           e.replicated ? ", on every peer" : "");
  } else {
    ctx.out << "  no on-demand step (no job, or no rank reached one)\n";
  }
  if (e.wiped) ctx.out << "  RAM wiped: the node comes back empty\n";
}

void Maintenance(Context& ctx, const MaintenanceArgs& a) {
  auto grace = supervisor::ParseDuration(a.grace);
  if (!grace.ok()) {
    ctx.err << "strata maintenance: --grace: " << grace.status().message() << "\n";
    ctx.exit_code = 2;
    return;
  }
  auto at = ResolveAgent(a.address, "strata maintenance");
  wire::MaintenanceRequest req;
  req.grace = *grace;
  req.lose_ram = a.lose_ram;
  auto call = at.ok() ? CallAgent(*at, a.address.auth, req.ToJson(),
                                  *grace + std::chrono::seconds(60), "strata maintenance")
                      : StatusOr<json>(at.status());
  StatusOr<wire::MaintenanceEvent> event = call.ok()
                                               ? wire::MaintenanceEvent::FromJson(*call)
                                               : StatusOr<wire::MaintenanceEvent>(call.status());
  if (!event.ok()) {
    ctx.err << "strata maintenance: " << event.status().message() << "\n";
    ctx.exit_code = 1;
    return;
  }
  if (a.json) {
    ctx.out << event->ToJson().dump(2) << "\n";
  } else {
    PrintEvent(ctx, *at, *event);
  }
  // Work may be lost if the ranks did not save (or were killed), or a node
  // losing its RAM had no peer copy.
  const bool had_step = event->sync_step.has_value();
  if ((had_step && !event->saved) || (a.lose_ram && had_step && !event->replicated) ||
      (event->ranks > 0 && !had_step) || event->ranks_killed > 0) {
    ctx.exit_code = 1;
  }
}

void Health(Context& ctx, const AgentAddress& address, bool as_json) {
  auto at = ResolveAgent(address, "strata health");
  StatusOr<json> call = at.ok() ? CallAgent(*at, address.auth, wire::Request(wire::Op::kHealth),
                                            std::chrono::seconds(10), "strata health")
                                : StatusOr<json>(at.status());
  StatusOr<wire::HealthReply> reply =
      call.ok() ? wire::HealthReply::FromJson(*call) : StatusOr<wire::HealthReply>(call.status());
  bool healthy = false;
  std::string description;
  if (reply.ok()) {
    healthy = reply->healthy;
    description = reply->description;
  } else if (at.ok()) {
    description = "The agent at " + *at + " is down: " + reply.status().message();
  } else {
    description = "Cannot find the agent: " + reply.status().message();
  }
  if (as_json) {
    json j = {{"health", healthy ? "HEALTHY" : "UNHEALTHY"}, {"healthDescription", description}};
    if (reply.ok() && reply->maintenance) j["maintenance"] = reply->maintenance->ToJson();
    ctx.out << j.dump(2) << "\n";
  } else {
    ctx.out << "health: " << (healthy ? "HEALTHY" : "UNHEALTHY")
            << " healthDescription: " << description << "\n";
  }
  ctx.exit_code = healthy ? 0 : 1;
}

}  // namespace

void RegisterMaintenanceCommands(CLI::App& app, Context& ctx) {
  auto margs = std::make_shared<MaintenanceArgs>();
  CLI::App* m = app.add_subcommand(
      "maintenance",
      "Deliver a maintenance notice to a node: SIGTERM to the ranks registered with its agent, "
      "wait for them, record the event");
  AddAgentAddressOptions(m, &margs->address);
  m->add_option("--grace", margs->grace, "How long the ranks get before SIGKILL")
      ->capture_default_str();
  m->add_flag("--lose-ram", margs->lose_ram,
              "The node comes back empty: hold it until its on-demand step is on its peers, then "
              "wipe its RAM directory");
  m->add_flag("--json", margs->json, "Print the event record as JSON");
  m->callback([&ctx, margs] { Maintenance(ctx, *margs); });

  struct HealthArgs {
    AgentAddress address;
    bool json = false;
  };
  auto hargs = std::make_shared<HealthArgs>();
  CLI::App* h = app.add_subcommand(
      "health", "Print a node's health: HEALTHY (with its last maintenance event) or UNHEALTHY");
  AddAgentAddressOptions(h, &hargs->address);
  h->add_flag("--json", hargs->json, "Print JSON");
  h->callback([&ctx, hargs] { Health(ctx, hargs->address, hargs->json); });
}

}  // namespace strata::cli
