// Copyright 2026 The Strata Authors.
#include "agent_peer.h"

#include <gtest/gtest.h>

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

nlohmann::json PutStep(const nlohmann::json& key, const nlohmann::json& index) {
  return {{"op", "put_step"}, {"key", key}, {"index", index}};
}

nlohmann::json Key(const std::string& job, int rank, int64_t step) {
  return {{"job", job}, {"rank", rank}, {"step", step}};
}

}  // namespace strata::testing
