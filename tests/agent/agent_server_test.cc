// Copyright 2026 The Strata Authors.
//
// The agent's server under stress: shut down while a peer's long-poll waits
// in its coordinator, and flooded with connections that never authenticate
// while a job restores.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/rpc/client.h"
#include "agent_peer.h"
#include "cluster.h"
#include "component_util.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// Destroying an agent while a peer's sync long-poll waits in its
// coordinator: ~Agent wakes the call and waits for its thread to finish.
// (The thread used to be left inside Coordinator::Sync after ~Agent had
// returned: a heap-use-after-free under ASan, a reply made from freed
// memory without it.)
TEST(AgentShutdownTest, DestroyingTheCoordinatorEndsASyncLongPollFirst) {
  ScratchDir dir("shutdown");
  agent::AgentConfig config;
  config.local_dir = dir.Sub("node0");
  config.listen = {"127.0.0.1", 0};
  config.advertise = {"127.0.0.1", 0};
  config.secret = "shutdown-test-secret-0123456789";
  auto agent = agent::Agent::Start(config);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  auto peer = agent::RpcClient::Connect((*agent)->listen_endpoint(),
                                        testing::PskTrust(config.secret), "node 1");
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  json reg = {{"op", "register"}, {"job", "j"}, {"nodes", 2},
              {"node", 1},        {"dp", 1},    {"address", "127.0.0.1:9"}};
  ASSERT_TRUE(peer->Call(reg, 5s).ok());
  json sync = {{"op", "sync"}, {"job", "j"}, {"node", 1}, {"step", 5}, {"generation", 0}};
  auto now = peer->Call(sync, 5s);  // stale generation: answers at once
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  sync["generation"] = (*now)["generation"];
  StatusOr<json> waited = json();
  std::thread poll([&] { waited = peer->Call(sync, 10s); });  // waits up to 2 s
  std::this_thread::sleep_for(300ms);
  agent->reset();
  poll.join();
  ASSERT_FALSE(waited.ok()) << waited->dump();
  EXPECT_NE(waited.status().message().find("shutting down"), std::string::npos)
      << waited.status().ToString();
}

// `count` TCP connections from `source` (a loopback address of its own)
// to `to` that never say a word; their descriptors.
std::vector<int> IdleConnections(const std::string& source, const agent::Endpoint& to, int count) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{}, dst{};
    from.sin_family = dst.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    ::inet_pton(AF_INET, to.host.c_str(), &dst.sin_addr);
    dst.sin_port = htons(to.port);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
      ADD_FAILURE() << "connection " << i << " from " << source << ": " << std::strerror(errno);
      if (fd >= 0) ::close(fd);
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

// 300 idle connections from one address that never authenticate, kept open
// and renewed while a job restores: the coordinator's agent keeps serving
// everyone else (before, they held every slot: "connection closed").
TEST(AgentFloodTest, IdleUnauthenticatedConnectionsDoNotStarveTheJob) {
  Cluster c(2, "flood");
  c.StartAll();
  for (const auto& r : c.Train(8, 4)) EXPECT_EQ(r.exit_code, 0) << r.err;
  const agent::Endpoint node0 = AgentEndpoint(c);
  std::vector<int> flood = IdleConnections("127.0.0.2", node0, 300);
  EXPECT_EQ(flood.size(), 300u);
  std::string error;
  EXPECT_FALSE(c.TryStatus(0, &error).empty()) << error;
  std::atomic<bool> done{false};
  std::thread renew([&] {  // a client that reconnects all the time
    while (!done) {
      for (int fd : IdleConnections("127.0.0.3", node0, 20)) ::close(fd);
      std::this_thread::sleep_for(50ms);
    }
  });
  auto runs = c.Train(12, 4);
  done = true;
  renew.join();
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(runs[n].exit_code, 0) << runs[n].err;
    EXPECT_EQ(runs[n].restored, "8") << runs[n].out;
    EXPECT_EQ(runs[n].digest, Cluster::ReferenceDigest(n, 12));
  }
  EXPECT_FALSE(c.TryStatus(0, &error).empty()) << error;
  EXPECT_NE(c.AgentLog(0).find("unauthenticated connection(s), latest from 127.0.0."),
            std::string::npos);
  for (int fd : flood) ::close(fd);
}

}  // namespace
}  // namespace strata::testing
