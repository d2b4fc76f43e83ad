// Copyright 2026 The Strata Authors.
//
// What the one-agent protocol tests (agent_protocol_test.cc) and the
// hostile-peer tests (agent_safety_test.cc) share: the client side of the
// file protocol, questions to the agent, and the fixture that starts one
// real `strata agent` process. Every wait is a bounded poll.
#ifndef STRATA_TESTS_AGENT_AGENT_PROTOCOL_FIXTURE_H_
#define STRATA_TESTS_AGENT_AGENT_PROTOCOL_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cluster.h"
#include "component_util.h"

namespace strata::testing {

inline bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// ---------------------------------------------------------------------------
// The client side of the file protocol.

inline std::string YamlPath(const std::string& dir) { return dir + "/replicator.yaml"; }

// Writes replicator.yaml the way Orbax does: a temp file renamed into place.
inline void WriteYaml(const std::string& dir, const std::string& text) {
  const std::string tmp = dir + "/replicator.yaml.tmp";
  WriteFile(tmp, text);
  ASSERT_EQ(::rename(tmp.c_str(), YamlPath(dir).c_str()), 0) << tmp;
}

inline std::string ValidYaml(const std::string& job, int nodes = 1) {
  return "job-name: " + job + "\nframework: orbax\nnode-rank: 0\nnodes: " + std::to_string(nodes) +
         "\n";
}

inline std::string Marker(const std::string& dir, const std::string& job, int64_t step) {
  return dir + "/" + job + "-s" + std::to_string(step) + "-n0-w0.restore";
}

inline bool YamlConsumed(const std::string& dir) {
  return WaitUntil([&] { return !Exists(YamlPath(dir)); });
}

// A client's handshake for a 1-node job `job`: write, wait for acceptance,
// wait for the marker of `step`.
inline void Handshake(const std::string& dir, const std::string& job, int64_t step) {
  WriteYaml(dir, ValidYaml(job));
  ASSERT_TRUE(YamlConsumed(dir)) << "the agent never accepted the yaml for " << job;
  EXPECT_FALSE(Exists(dir + "/replicator.failed")) << ReadFile(dir + "/replicator.failed");
  ASSERT_TRUE(WaitUntil([&] { return Exists(Marker(dir, job, step)); }))
      << "no marker " << Marker(dir, job, step);
}

// ---------------------------------------------------------------------------
// Asking the agent.

inline bool Holds(const nlohmann::json& status, const std::string& job, int rank, int64_t step) {
  if (!status.contains("steps")) return false;
  for (const auto& s : status["steps"]) {
    if (s["job"] == job && s["rank"] == rank && s["step"] == step) return true;
  }
  return false;
}

// The agent answers `strata status` (it did not crash or wedge).
inline void ExpectServing(const Cluster& c) {
  nlohmann::json s = c.Status(0);
  EXPECT_TRUE(s.is_object() && s.contains("address")) << c.AgentLog(0);
}

class AgentProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override { c_.StartAgent(0); }
  std::string dir() const { return c_.dir(0); }
  Cluster c_{1, "proto"};
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_AGENT_AGENT_PROTOCOL_FIXTURE_H_
