// Copyright 2026 The Strata Authors.
#include "agent_peer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "component_util.h"

namespace strata::testing {

size_t EntriesIn(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  size_t n = 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    ++n;
  }
  return n;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

agent::Endpoint AgentEndpoint(const Cluster& c) {
  auto e = agent::ParseEndpoint(c.address(0));
  EXPECT_TRUE(e.ok()) << c.address(0);
  return e.ok() ? *e : agent::Endpoint{};
}

StatusOr<agent::RpcClient> PeerConnect(const Cluster& c) {
  return agent::RpcClient::Connect(AgentEndpoint(c), PskTrust(c.secret()), "hostile peer");
}

void ServeJob(const Cluster& c, const std::string& job, int rank, int nodes) {
  const std::string yaml = c.dir(0) + "/replicator.yaml", tmp = yaml + ".tmp";
  WriteFile(tmp, "job-name: " + job + "\nframework: orbax\nnode-rank: " + std::to_string(rank) +
                     "\nnodes: " + std::to_string(nodes) + "\n");
  ASSERT_EQ(::rename(tmp.c_str(), yaml.c_str()), 0) << tmp;
  EXPECT_TRUE(WaitUntil([&] { return c.TryStatus(0).contains("restore_state"); })) << c.AgentLog(0);
}

nlohmann::json PutStep(const nlohmann::json& key, const nlohmann::json& index) {
  return {{"op", "put_step"}, {"key", key}, {"index", index}};
}

nlohmann::json Key(const std::string& job, int rank, int64_t step) {
  return {{"job", job}, {"rank", rank}, {"step", step}};
}

}  // namespace strata::testing
