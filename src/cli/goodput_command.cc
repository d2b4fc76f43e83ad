// Copyright 2026 The Strata Authors.
//
// strata goodput: where a job's time went, from the agents of its nodes
// (agent/node/goodput.h; docs/operations.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "util/thread_pool.h"
#include "wire/control.h"

namespace strata::cli {
namespace {

struct GoodputArgs {
  std::vector<std::string> agents;
  ClientAuth auth;
  bool json = false;
};

struct Node {
  std::string agent;
  std::optional<int> rank;
  wire::Goodput g;
};

std::string Pct(double part, double whole) {
  return whole > 0 ? fmt::format("{:5.1f}%", 100 * part / whole) : "    -";
}

void PrintLine(Context& ctx, const std::string& who, const wire::Goodput& g) {
  ctx.out << fmt::format(
      "{:<28} {:>9.1f} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6}\n", who, g.elapsed_seconds,
      Pct(g.productive_seconds, g.elapsed_seconds), Pct(g.save_seconds, g.elapsed_seconds),
      Pct(g.restore_seconds, g.elapsed_seconds), Pct(g.wasted_seconds, g.elapsed_seconds),
      Pct(g.other_seconds, g.elapsed_seconds), g.step, g.wasted_steps, g.interruptions);
}

// The job's: every category averaged over the nodes (they train in step).
wire::Goodput JobGoodput(const std::vector<Node>& nodes) {
  wire::Goodput j;
  const double n = static_cast<double>(nodes.size());
  for (const Node& node : nodes) {
    const wire::Goodput& g = node.g;
    j.elapsed_seconds += g.elapsed_seconds / n;
    for (const wire::GoodputCategory& c : wire::kGoodputCategories)
      j.*c.seconds += g.*c.seconds / n;
    j.step = std::max(j.step, g.step);
    j.wasted_steps = std::max(j.wasted_steps, g.wasted_steps);
    j.interruptions = std::max(j.interruptions, g.interruptions);
  }
  j.goodput = j.elapsed_seconds > 0 ? j.productive_seconds / j.elapsed_seconds : 0;
  return j;
}

// Every agent's ledger, asked all at once (a hung agent costs its 10 s
// once, not once per node after it).
StatusOr<std::vector<Node>> AskAgents(const GoodputArgs& a) {
  std::vector<Node> nodes(a.agents.size());
  Status s = RunParallel(
      nodes.size(), std::min<size_t>(nodes.size(), 64),
      [&](size_t i, const std::atomic<bool>&) -> Status {
        const std::string& agent = a.agents[i];
        STRATA_ASSIGN_OR_RETURN(
            wire::StatusReply status,
            AgentStatus(agent, a.auth, std::chrono::seconds(10), "strata goodput"));
        if (!status.goodput) {
          return FailedPreconditionError("the agent at " + agent + " has seen no job start yet");
        }
        nodes[i] = {agent, std::nullopt, *status.goodput};
        if (status.job) nodes[i].rank = status.job->node;
        return Status::Ok();
      });
  if (!s.ok()) return s;
  return nodes;
}

void RunGoodput(Context& ctx, const GoodputArgs& a) {
  StatusOr<std::vector<Node>> asked = AskAgents(a);
  if (!asked.ok()) {
    ctx.err << "strata goodput: " << asked.status().message() << "\n";
    ctx.exit_code = 1;
    return;
  }
  const std::vector<Node>& nodes = *asked;
  const wire::Goodput job = JobGoodput(nodes);
  if (a.json) {
    nlohmann::json per = nlohmann::json::array();
    for (const Node& n : nodes) {
      nlohmann::json j = n.g.ToJson();
      j["agent"] = n.agent;
      if (n.rank) j["node"] = *n.rank;
      per.push_back(j);
    }
    ctx.out << nlohmann::json{{"job", job.ToJson()}, {"nodes", per}}.dump(2) << "\n";
    return;
  }
  ctx.out << fmt::format("{:<28} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6}\n", "",
                         "elapsed s", "product.", "save", "restore", "wasted", "other", "step",
                         "lost", "intr.");
  for (const Node& n : nodes) {
    PrintLine(ctx, n.rank ? fmt::format("node {} ({})", *n.rank, n.agent) : n.agent, n.g);
  }
  PrintLine(ctx, "job", job);
  ctx.out << fmt::format(
      "goodput {:.1f}%: of {:.0f} s, {:.1f} s training steps kept, {:.1f} s blocked in saves, "
      "{:.1f} s restoring, {:.1f} s recomputing {} lost step(s), {:.1f} s down between "
      "interruptions and restarts\n",
      100 * job.goodput, job.elapsed_seconds, job.productive_seconds, job.save_seconds,
      job.restore_seconds, job.wasted_seconds, job.wasted_steps, job.other_seconds);
}

}  // namespace

void RegisterGoodputCommand(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<GoodputArgs>();
  CLI::App* cmd = app.add_subcommand(
      "goodput", "Where a job's time went: productive, saves, restores, recomputation, down");
  cmd->add_option("--agent", a->agents, "HOST:PORT of a node's agent; repeat for every node")
      ->required()
      ->delimiter(',');
  AddClientAuthOptions(cmd, &a->auth);
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&ctx, a] { RunGoodput(ctx, *a); });
}

}  // namespace strata::cli
