// Copyright 2026 The Strata Authors.
//
// Cluster: several real `strata agent` processes on loopback, one RAM
// directory each (under /dev/shm), and real toy-trainer processes talking
// to them through the replicator protocol. Node 0's agent coordinates.
#ifndef STRATA_TESTS_HARNESS_CLUSTER_H_
#define STRATA_TESTS_HARNESS_CLUSTER_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace strata::testing {

// A loopback TCP port that was free a moment ago.

struct TrainOptions {
  std::string style = "orbax";  // the client's protocol style
  int state_mb = 2;
  int step_ms = 0;
  int peers_per_node = 1;
  int data_parallelism = 0;  // 0: not in the yaml
  std::string job = "job1";
  int backup_interval_steps = 0;  // 0: not in the yaml
  // Wait, after the trainers, until every agent replicated the last step.
  bool wait_replicated = true;
  // Seed of node i; replicas of one data-parallel column must share it.
  std::function<int(int)> seed = [](int node) { return 100 + node; };
  // --exit-after-ondemand: a notice ends the trainer (exit 75).
  bool exit_after_ondemand = false;
  // The yaml's redundancy ("": none in the yaml).
  std::string redundancy;
};

struct TrainerRun {
  std::string out, err;
  int exit_code = -1;
  std::string restored;  // "fresh" or the restored step
  std::string digest;
};

class Cluster {
 public:
  explicit Cluster(int nodes, const std::string& tag = "cluster");
  // Stops every agent still running (SIGINT: at once, no drain).
  ~Cluster();

  int nodes() const { return nodes_; }
  std::string dir(int node) const;
  std::string address(int node) const;
  // The node's agent's local socket (<dir>/.strata-agent/agent.sock): how
  // `strata` on the node reaches it, without the secret.
  std::string socket(int node) const;
  const std::string& secret() const { return secret_; }
  const std::string& secret_file() const { return secret_file_; }

  void StartAgent(int node);
  void StartAll();
  // Arguments added to every agent started from now on (e.g. --backup URL),
  // and environment entries ("K=V") for one node's agent.
  void SetAgentArgs(std::vector<std::string> args) { agent_args_ = std::move(args); }
  // The client commands the cluster runs (Cli, Status) reach a node's agent
  // through its local socket, as on the node. After SetCliArgs they go over
  // the network with the secret and these arguments: how a test reaches
  // agents that run with other TLS settings.
  void SetCliArgs(std::vector<std::string> args) { cli_args_ = std::move(args); }
  void SetAgentEnv(int node, std::vector<std::string> env);
  // Waits until node's agent reports a committed backup of at least `step`;
  // returns its id ("" on timeout).
  std::string WaitForBackup(int node, int64_t step,
                            std::chrono::seconds limit = std::chrono::seconds(60)) const;
  void KillAgent(int node);  // SIGKILL
  // Waits for node's agent to exit by itself; its exit code (128+signal
  // when killed), or -1 after `limit`.
  int WaitAgentExit(int node, std::chrono::milliseconds limit);
  // SIGTERM; returns how long the agent took to exit (or -1 s if it did not
  // within `limit`).
  std::chrono::milliseconds StopAgent(int node, std::chrono::milliseconds limit);
  void WipeDir(int node);  // the node comes back empty
  std::string AgentLog(int node) const;

  // Runs one trainer per node (node i uses seed 100 + i) to `steps`,
  // saving every `interval` steps, and waits for all of them.
  std::vector<TrainerRun> Train(int64_t steps, int64_t interval, const std::string& style = "orbax",
                                int state_mb = 2, int step_ms = 0);
  std::vector<TrainerRun> Train(int64_t steps, int64_t interval, const TrainOptions& options);
  // The trainer of one node, started and left running; Finish waits for it.
  std::vector<std::string> TrainerArgs(int node, int64_t steps, int64_t interval,
                                       const TrainOptions& options) const;
  std::unique_ptr<Child> StartTrainer(int node, int64_t steps, int64_t interval,
                                      const TrainOptions& options) const;
  static TrainerRun Finish(Child& trainer,
                           std::chrono::milliseconds limit = std::chrono::minutes(3));
  // `strata <command> --agent <node's socket> args` (after SetCliArgs:
  // `--agent <node's address> --secret-file ...`);
  // Cli runs it and returns its exit code, with its stdout and stderr in *out.
  std::vector<std::string> CliArgs(const std::string& command, int node,
                                   const std::vector<std::string>& args) const;
  int Cli(const std::string& command, int node, const std::vector<std::string>& args,
          std::string* out) const;
  // `strata status --json` of a node's agent; a test failure if it fails.
  nlohmann::json Status(int node) const;
  // The same, or an empty object (and *error) while the agent is down.
  nlohmann::json TryStatus(int node, std::string* error = nullptr) const;

  // The digest an uninterrupted run of node `node` reaches at `steps`.
  static std::string ReferenceDigest(int node, int64_t steps, int state_mb = 2);
  static std::string ReferenceDigestForSeed(int seed, int64_t steps, int state_mb);

 private:
  const int nodes_;
  ScratchDir root_;
  std::string secret_, secret_file_;
  std::vector<uint16_t> ports_;
  std::vector<std::unique_ptr<Child>> agents_;
  std::vector<std::string> old_logs_;  // logs of killed agents, per node
  std::vector<std::string> agent_args_;
  std::optional<std::vector<std::string>> cli_args_;  // set: over the network
  std::map<int, std::vector<std::string>> agent_env_;
};

// Every run exited 0 having restored `restored` ("fresh" or a step) and
// ended where an uninterrupted run of its node ends at `steps`, bit for bit.
void ExpectAll(const std::vector<TrainerRun>& runs, const std::string& restored, int64_t steps,
               int state_mb = 2);

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_CLUSTER_H_
