// Copyright 2026 The Strata Authors.
#include "cluster.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "strata/env.h"

namespace strata::testing {

Cluster::Cluster(int nodes, const std::string& tag)
    : nodes_(nodes),
      root_(tag),
      agents_(static_cast<size_t>(nodes)),
      old_logs_(static_cast<size_t>(nodes)) {
  secret_ = "test-secret-" + std::to_string(::getpid()) + "-0123456789";
  secret_file_ = root_.Sub("secret");
  WriteSecretFile(secret_file_, secret_ + "\n");
  for (int i = 0; i < nodes; ++i) ports_.push_back(FreePort());
}

// SIGINT stops an agent at once. SIGTERM would drain first (the node going
// away: up to --grace-seconds for a served job's on-demand step), which a
// test that is over does not need; StopAgent sends it for the tests of it.
Cluster::~Cluster() {
  for (auto& a : agents_) {
    if (a) a->Signal(SIGINT);
  }
  for (auto& a : agents_) {
    if (a) a->Wait(std::chrono::seconds(10));
  }
}

std::string Cluster::dir(int node) const { return root_.Sub("node" + std::to_string(node)); }
std::string Cluster::socket(int node) const { return dir(node) + "/.strata-agent/agent.sock"; }

std::string Cluster::address(int node) const {
  return "127.0.0.1:" + std::to_string(ports_[static_cast<size_t>(node)]);
}

void Cluster::StartAgent(int node) {
  auto& slot = agents_[static_cast<size_t>(node)];
  if (slot) old_logs_[static_cast<size_t>(node)] += slot->Stderr();
  std::vector<std::string> argv = {
      BinaryPath("strata"), "agent",       "--local-dir",     dir(node),
      "--listen",           address(node), "--coordinator",   address(0),
      "--secret-file",      secret_file_,  "--grace-seconds", "20"};
  argv.insert(argv.end(), agent_args_.begin(), agent_args_.end());
  slot = std::make_unique<Child>(argv, agent_env_[node]);
  // Ready once it listens.
  for (int i = 0; i < 500 && slot->Stderr().find("listening on") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(slot->Stderr().find("listening on"), std::string::npos) << slot->Stderr();
}

void Cluster::SetAgentEnv(int node, std::vector<std::string> env) {
  agent_env_[node] = std::move(env);
}

std::string Cluster::WaitForBackup(int node, int64_t step, std::chrono::seconds limit) const {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto j = TryStatus(node);
    if (j.contains("backup") && j["backup"].contains("newest") &&
        j["backup"]["newest"].value("step", int64_t{-1}) >= step) {
      return j["backup"]["newest"].value("id", "");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

void Cluster::StartAll() {
  for (int i = 0; i < nodes_; ++i) StartAgent(i);
}

void Cluster::KillAgent(int node) {
  auto& slot = agents_[static_cast<size_t>(node)];
  slot->Signal(SIGKILL);
  slot->Wait(std::chrono::seconds(10));
}

int Cluster::WaitAgentExit(int node, std::chrono::milliseconds limit) {
  return agents_[static_cast<size_t>(node)]->Wait(limit);
}

std::chrono::milliseconds Cluster::StopAgent(int node, std::chrono::milliseconds limit) {
  auto& slot = agents_[static_cast<size_t>(node)];
  auto start = std::chrono::steady_clock::now();
  slot->Signal(SIGTERM);
  if (slot->Wait(limit) < 0) return std::chrono::milliseconds(-1);
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start);
}

void Cluster::WipeDir(int node) { ASSERT_TRUE(Env::Default()->RemoveAll(dir(node)).ok()); }

std::string Cluster::AgentLog(int node) const {
  const auto& slot = agents_[static_cast<size_t>(node)];
  return old_logs_[static_cast<size_t>(node)] + (slot ? slot->Stderr() : "");
}

std::vector<TrainerRun> Cluster::Train(int64_t steps, int64_t interval, const std::string& style,
                                       int state_mb, int step_ms) {
  TrainOptions o;
  o.style = style;
  o.state_mb = state_mb;
  o.step_ms = step_ms;
  return Train(steps, interval, o);
}

std::vector<std::string> Cluster::TrainerArgs(int node, int64_t steps, int64_t interval,
                                              const TrainOptions& o) const {
  std::vector<std::string> args = {BinaryPath("toy-trainer"), "--dir", dir(node)};
  auto flag = [&](const char* name, int64_t value) {
    args.push_back(name);
    args.push_back(std::to_string(value));
  };
  flag("--steps", steps);
  flag("--step-ms", o.step_ms);
  flag("--save-interval-steps", interval);
  flag("--state-mb", o.state_mb);
  flag("--seed", o.seed(node));
  flag("--node-rank", node);
  flag("--nodes", nodes_);
  flag("--peers-per-node", o.peers_per_node);
  if (o.data_parallelism > 0) flag("--assume-data-parallelism", o.data_parallelism);
  if (o.backup_interval_steps > 0) flag("--backup-interval-steps", o.backup_interval_steps);
  if (o.exit_after_ondemand) args.push_back("--exit-after-ondemand");
  if (!o.redundancy.empty()) {
    args.push_back("--redundancy");
    args.push_back(o.redundancy);
  }
  for (const char* a : {"--replicator", o.style.c_str(), "--job", o.job.c_str()}) args.push_back(a);
  return args;
}

std::unique_ptr<Child> Cluster::StartTrainer(int node, int64_t steps, int64_t interval,
                                             const TrainOptions& o) const {
  return std::make_unique<Child>(TrainerArgs(node, steps, interval, o));
}

TrainerRun Cluster::Finish(Child& t, std::chrono::milliseconds limit) {
  TrainerRun r;
  r.exit_code = t.Wait(limit);
  r.out = t.Stdout();
  r.err = t.Stderr();
  r.restored =
      r.out.find("fresh start") != std::string::npos ? "fresh" : LastValue(r.out, "restored step");
  r.digest = LastValue(r.out, "digest");
  return r;
}

std::vector<std::string> Cluster::CliArgs(const std::string& command, int node,
                                          const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {BinaryPath("strata"), command, "--agent", socket(node)};
  if (cli_args_) {
    argv = {BinaryPath("strata"), command, "--agent", address(node), "--secret-file", secret_file_};
    argv.insert(argv.end(), cli_args_->begin(), cli_args_->end());
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

int Cluster::Cli(const std::string& command, int node, const std::vector<std::string>& args,
                 std::string* out) const {
  return Run(CliArgs(command, node, args), out);
}

std::vector<TrainerRun> Cluster::Train(int64_t steps, int64_t interval, const TrainOptions& o) {
  std::vector<std::unique_ptr<Child>> trainers;
  for (int i = 0; i < nodes_; ++i) trainers.push_back(StartTrainer(i, steps, interval, o));
  std::vector<TrainerRun> runs;
  for (auto& t : trainers) runs.push_back(Finish(*t));
  // Wait until every agent has ingested and replicated the last step saved
  // (with no peers, "replicated" means ingested).
  const int64_t last = steps - steps % interval;
  // The check is on the figure the wait saw last, not on a status asked for
  // again: a test may restart an agent meanwhile (PeerRestartMidTransfer).
  for (int i = 0; i < nodes_ && o.wait_replicated; ++i) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::string error;  // the last status call's, if it failed
    auto newest = [&] {
      error.clear();
      return TryStatus(i, &error).value("newest_replicated", int64_t{-1});
    };
    int64_t replicated = -1;
    while ((replicated = newest()) < last && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_GE(replicated, last) << "node " << i << (error.empty() ? "" : ": " + error);
  }
  return runs;
}

nlohmann::json Cluster::TryStatus(int node, std::string* error) const {
  std::string out;
  int rc = Cli("status", node, {"--json"}, &out);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (rc != 0 || !j.is_object()) {
    if (error) *error = out;
    return nlohmann::json::object();
  }
  return j;
}

nlohmann::json Cluster::Status(int node) const {
  std::string error;
  auto j = TryStatus(node, &error);
  EXPECT_FALSE(j.empty()) << "strata status of node " << node << ": " << error;
  return j;
}

std::string Cluster::ReferenceDigest(int node, int64_t steps, int state_mb) {
  return ReferenceDigestForSeed(100 + node, steps, state_mb);
}

std::string Cluster::ReferenceDigestForSeed(int seed, int64_t steps, int state_mb) {
  static std::map<std::tuple<int, int64_t, int>, std::string> cache;
  auto key = std::make_tuple(seed, steps, state_mb);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  ScratchDir d("ref");
  std::string out;
  Run({BinaryPath("toy-trainer"), "--dir", d.path(), "--steps", std::to_string(steps), "--state-mb",
       std::to_string(state_mb), "--seed", std::to_string(seed)},
      &out);
  return cache[key] = LastValue(out, "digest");
}

void ExpectAll(const std::vector<TrainerRun>& runs, const std::string& restored, int64_t steps,
               int state_mb) {
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].exit_code, 0) << "node " << i << ": " << runs[i].err;
    EXPECT_EQ(runs[i].restored, restored) << "node " << i << ": " << runs[i].out;
    EXPECT_EQ(runs[i].digest, Cluster::ReferenceDigest(static_cast<int>(i), steps, state_mb))
        << "node " << i << " did not end where an uninterrupted run ends";
  }
}

}  // namespace strata::testing
