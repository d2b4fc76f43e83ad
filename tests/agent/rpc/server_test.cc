// Copyright 2026 The Strata Authors.
//
// The agent's Server (event loop, workers, long calls) with the real
// Coordinator behind it, over real loopback sockets, in one process: parked
// calls hold no thread; a long call takes the socket and gives it back; the
// long-call budget; stopping with calls in flight.
#include "agent/rpc/server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/coordinator/coordinator.h"
#include "agent/rpc/client.h"
#include "component_util.h"
#include "net/frame.h"
#include "test_util.h"
#include "util/process.h"
#include "wire/json.h"

namespace strata::agent {
namespace {

using namespace std::chrono_literals;

constexpr char kSecret[] = "server-test-secret-0123456789";

class ServerTest : public ::testing::Test {
 protected:
  // Serves `coordinator_` plus the test's own calls: "long" (a long call
  // that answers with its thread's id after `long_gate_` opens),
  // "hold" (a control call whose answer the test gives later) and "big"
  // (answered with 16 MiB, more than loopback's socket buffers hold: 4 MiB
  // to send, and a receive buffer that grows only as its reader reads).
  void StartServer(int max_long_calls = 64,
                   std::chrono::milliseconds idle_timeout = std::chrono::minutes(5)) {
    auto listener = net::Socket::Listen("127.0.0.1", 0, SOMAXCONN);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    endpoint_ = Endpoint{"127.0.0.1", static_cast<uint16_t>(*listener->LocalPort())};
    Server::Options options;
    options.trust = testing::PskTrust(kSecret);
    options.max_long_calls = max_long_calls;
    options.idle_timeout = idle_timeout;
    options.max_request_bytes = max_request_bytes_;
    options.auth_timeout = auth_timeout_;
    options.reply_timeout = reply_timeout_;
    Server::Handlers handlers;
    handlers.is_long = [](const std::string& op) { return op == "long"; };
    handlers.control = [this](const json& request, const std::string&, Server::Reply reply) {
      if (request.value("op", "") == "hold") {
        std::lock_guard<std::mutex> l(mu_);
        held_.push_back(std::move(reply));
        cv_.notify_all();
        return;
      }
      if (request.value("op", "") == "big") return reply(json{{"big", std::string(16 << 20, 'b')}});
      coordinator_.HandleAsync(request, std::move(reply));
    };
    handlers.long_call = [this](const json&, net::Socket&) -> StatusOr<json> {
      std::unique_lock<std::mutex> l(mu_);
      ++long_running_;
      cv_.notify_all();
      cv_.wait(l, [this] { return long_gate_; });
      --long_running_;
      return json{{"thread", std::hash<std::thread::id>()(std::this_thread::get_id())}};
    };
    auto server = Server::Start(std::move(*listener), options, handlers);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  RpcClient Connect(const std::string& id) {
    auto c = RpcClient::Connect(endpoint_, testing::PskTrust(kSecret), id);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }

  void OpenGate() {
    std::lock_guard<std::mutex> l(mu_);
    long_gate_ = true;
    cv_.notify_all();
  }

  void TearDown() override {
    OpenGate();
    coordinator_.Shutdown();
    if (server_) server_->Stop();
  }

  Coordinator coordinator_;
  std::unique_ptr<Server> server_;
  Endpoint endpoint_;
  uint32_t max_request_bytes_ = kMaxControlBytes;
  std::chrono::milliseconds auth_timeout_{5000};
  std::chrono::milliseconds reply_timeout_{30000};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Server::Reply> held_;  // GUARDED_BY(mu_)
  bool long_gate_ = false;           // GUARDED_BY(mu_)
  int long_running_ = 0;             // GUARDED_BY(mu_)
};

// The handshake's budget covers TLS: a client that starts a ClientHello and
// stalls is dropped at the auth timeout, and a client that knows the secret
// still gets through meanwhile.
TEST_F(ServerTest, AClientStalledInTheTlsHandshakeIsDroppedAtTheAuthTimeout) {
  auth_timeout_ = 300ms;
  StartServer();
  auto stalled = net::Socket::Connect(endpoint_.host, endpoint_.port, 5s);
  ASSERT_TRUE(stalled.ok());
  // A TLS record header announcing a 512-byte handshake message, then 8 of them.
  const std::string start("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x00\x00", 13);
  ASSERT_TRUE(stalled->SendAll(start.data(), start.size(), net::DeadlineAfter(5s)).ok());
  Connect("node 1");  // through TLS and the handshake meanwhile
  const auto t0 = std::chrono::steady_clock::now();
  char byte;
  Status closed = stalled->RecvAll(&byte, 1, net::DeadlineAfter(5s));
  EXPECT_EQ(closed.code(), StatusCode::kUnavailable) << closed.ToString();  // closed, not timed out
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

// 400 nodes each with a sync long-poll parked at the coordinator: the
// process runs no more threads than with none (before, one per call).
// Shutdown answers every one of them.
TEST_F(ServerTest, ParkedCallsHoldNoThread) {
  StartServer();
  constexpr int kNodes = 400;
  for (int n = 0; n < kNodes; ++n) {
    auto r = coordinator_.Handle({{"op", "register"},
                                  {"job", "j"},
                                  {"nodes", kNodes},
                                  {"node", n},
                                  {"dp", 1},
                                  {"address", "127.0.0.1:9"},
                                  {"incarnation", "i" + std::to_string(n)}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  const int threads_before = ProcessStatus("Threads").value_or(-1);
  // Every connection first, then every call, then every wait: a wait parks
  // for its 60 s from its arrival, and under TSan on a loaded machine 400
  // TLS handshakes took longer than that, so waits parked early ran out
  // before the last one parked.
  std::vector<RpcClient> clients;
  for (int n = 0; n < kNodes; ++n) clients.push_back(Connect("node " + std::to_string(n)));
  std::vector<json> generations;
  for (int n = 0; n < kNodes; ++n) {
    json first = {{"op", "sync"}, {"job", "j"}, {"node", n}, {"generation", 0}};
    auto now = clients[n].Call(first, 30s);  // a stale generation answers at once
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    generations.push_back((*now)["generation"]);
  }
  for (int n = 0; n < kNodes; ++n) {
    json wait = {{"op", "sync"},
                 {"job", "j"},
                 {"node", n},
                 {"generation", generations[n]},
                 {"wait_ms", 60000}};
    ASSERT_TRUE(
        net::SendFrame(clients[n].socket(), kFrameCall, wait.dump(), net::DeadlineAfter(10s)).ok());
  }
  // The last waits park once the server has read them; the test once
  // allowed 5 s, too little under TSan on a loaded machine.
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return coordinator_.waiting() == static_cast<size_t>(kNodes); }, 55s))
      << coordinator_.waiting() << " of " << kNodes << " calls parked";
  EXPECT_LE(ProcessStatus("Threads").value_or(-1), threads_before + 2);
  EXPECT_EQ(server_->stats().open, kNodes);

  coordinator_.Shutdown();
  for (auto& c : clients) {
    auto reply = net::RecvFrame(c.socket(), 1 << 20, net::DeadlineAfter(10s));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    Status s = wire::StatusFromJson(json::parse(reply->payload), "server");
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  }
  EXPECT_EQ(coordinator_.waiting(), 0u);
}

// A wait runs out at its own wait_ms, answered by the coordinator's timer.
TEST_F(ServerTest, AWaitEndsAtItsDeadline) {
  StartServer();
  ASSERT_TRUE(coordinator_
                  .Handle({{"op", "register"},
                           {"job", "j"},
                           {"nodes", 2},
                           {"node", 0},
                           {"dp", 1},
                           {"address", "127.0.0.1:9"}})
                  .ok());
  RpcClient c = Connect("node 0");
  const auto start = std::chrono::steady_clock::now();
  auto r = c.Call(
      {{"op", "await_plan"}, {"job", "j"}, {"round", 1}, {"plan_version", 0}, {"wait_ms", 100}},
      10s);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("1 more node(s) to register"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(c.answered());
  // The connection is in step: it carries the next call.
  auto again = c.Call({{"op", "node_address"}, {"job", "j"}, {"node", 0}}, 10s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)["address"], "127.0.0.1:9");
}

// A long call runs on a thread of its own with the connection's socket, and
// the connection serves calls after it.
TEST_F(ServerTest, ALongCallGivesTheConnectionBack) {
  StartServer();
  OpenGate();
  RpcClient c = Connect("node 1");
  auto first = c.Call({{"op", "long"}}, 10s);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = c.Call({{"op", "long"}}, 10s);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto control = c.Call({{"op", "node_address"}, {"job", "nobody"}, {"node", 0}}, 10s);
  EXPECT_EQ(control.status().code(), StatusCode::kNotFound) << control.status().ToString();
}

// A call larger than max_request_bytes (the agent's max-message-bytes)
// closes its connection before its payload is read; other connections and
// smaller calls are served.
TEST_F(ServerTest, ACallOverTheRequestLimitClosesItsConnection) {
  max_request_bytes_ = 64 << 10;
  StartServer();
  RpcClient big = Connect("node 1");
  json request = {{"op", "node_address"}, {"job", std::string(100 << 10, 'j')}, {"node", 0}};
  auto refused = big.Call(request, 10s);
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(big.answered());
  RpcClient small = Connect("node 2");
  auto served = small.Call({{"op", "node_address"}, {"job", "nobody"}, {"node", 0}}, 10s);
  EXPECT_EQ(served.status().code(), StatusCode::kNotFound) << served.status().ToString();
}

// Past max_long_calls, a long call is answered RESOURCE_EXHAUSTED at once
// and the connection stays usable.
TEST_F(ServerTest, LongCallsPastTheBudgetAreRefused) {
  StartServer(/*max_long_calls=*/1);
  RpcClient busy = Connect("node 1");
  ASSERT_TRUE(net::SendFrame(busy.socket(), kFrameCall, json({{"op", "long"}}).dump(),
                             net::DeadlineAfter(10s))
                  .ok());
  {
    std::unique_lock<std::mutex> l(mu_);
    ASSERT_TRUE(cv_.wait_for(l, 10s, [this] { return long_running_ == 1; }));
  }
  RpcClient other = Connect("node 2");
  auto refused = other.Call({{"op", "long"}}, 10s);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  OpenGate();
  auto done = net::RecvFrame(busy.socket(), 1 << 20, net::DeadlineAfter(10s));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  auto now = other.Call({{"op", "long"}}, 10s);
  EXPECT_TRUE(now.ok()) << now.status().ToString();
}

// Stop with a control call unanswered and a long call running: Stop waits
// for the long call, closes the connection, and an answer given afterwards
// goes nowhere (no crash, no leak under the sanitizers).
TEST_F(ServerTest, StopWithCallsInFlight) {
  StartServer();
  RpcClient holder = Connect("node 1");
  ASSERT_TRUE(net::SendFrame(holder.socket(), kFrameCall, json({{"op", "hold"}}).dump(),
                             net::DeadlineAfter(10s))
                  .ok());
  RpcClient runner = Connect("node 2");
  ASSERT_TRUE(net::SendFrame(runner.socket(), kFrameCall, json({{"op", "long"}}).dump(),
                             net::DeadlineAfter(10s))
                  .ok());
  {
    std::unique_lock<std::mutex> l(mu_);
    ASSERT_TRUE(cv_.wait_for(l, 10s, [this] { return held_.size() == 1 && long_running_ == 1; }));
  }
  std::thread stopper([this] { server_->Stop(); });
  std::this_thread::sleep_for(100ms);
  OpenGate();  // the long call returns; Stop can finish
  stopper.join();
  std::vector<Server::Reply> held;
  {
    std::lock_guard<std::mutex> l(mu_);
    held.swap(held_);
  }
  for (auto& reply : held) reply(json{{"late", true}});
  server_.reset();
  // Both connections were closed by the server (the long call's answer,
  // sent by its own thread, may come first).
  for (RpcClient* c : {&holder, &runner}) {
    StatusOr<net::Frame> f = net::RecvFrame(c->socket(), 1 << 20, net::DeadlineAfter(10s));
    if (f.ok()) f = net::RecvFrame(c->socket(), 1 << 20, net::DeadlineAfter(10s));
    EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().ToString();
  }
}

// RpcPool keeps a connection across calls (one handshake for several calls)
// and replaces a kept one the server closed meanwhile, without the caller
// seeing an error.
TEST_F(ServerTest, APoolKeepsItsConnectionAndReplacesAClosedOne) {
  StartServer(64, /*idle_timeout=*/200ms);
  RpcPool pool(testing::PskTrust(kSecret));
  json ask = {{"op", "node_address"}, {"job", "nobody"}, {"node", 0}};
  for (int i = 0; i < 3; ++i) {
    auto r = pool.Call(endpoint_, "node 1", ask, 10s);
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  }
  EXPECT_EQ(server_->stats().authenticated, 1u);
  for (int i = 0; i < 300 && server_->stats().open > 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server_->stats().open, 0);  // the server closed the idle connection
  auto r = pool.Call(endpoint_, "node 1", ask, 10s);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_EQ(server_->stats().authenticated, 2u);
}

// Each call moves the idle deadline later (without setting the timer
// again: it wakes at the first deadline and sleeps until the latest). A
// connection in use outlives its idle timeout many times over; once unused,
// it is closed.
TEST_F(ServerTest, AConnectionInUseStaysOpenAndClosesOnceIdle) {
  StartServer(64, /*idle_timeout=*/1s);
  RpcClient c = Connect("node 1");
  json ask = {{"op", "node_address"}, {"job", "nobody"}, {"node", 0}};
  const auto until = std::chrono::steady_clock::now() + 2500ms;
  int calls = 0;
  while (std::chrono::steady_clock::now() < until) {
    auto r = c.Call(ask, 10s);
    ASSERT_EQ(r.status().code(), StatusCode::kNotFound)
        << "call " << calls << ": " << r.status().ToString();
    ++calls;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(server_->stats().authenticated, 1u);  // one connection served them all
  EXPECT_EQ(server_->stats().open, 1);
  for (int i = 0; i < 1000 && server_->stats().open > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_->stats().open, 0);  // closed once idle
}

// A reply the peer does not take is bounded by reply_timeout: the server
// closes the connection instead of holding the reply.
TEST_F(ServerTest, AReplyThePeerDoesNotTakeClosesTheConnection) {
  reply_timeout_ = 300ms;
  StartServer();
  RpcClient c = Connect("node 1");
  ASSERT_TRUE(
      net::SendFrame(c.socket(), kFrameCall, json{{"op", "big"}}.dump(), net::DeadlineAfter(10s))
          .ok());
  EXPECT_EQ(server_->stats().open, 1);
  // Generous: under ASan, with this test's JSON code unoptimized, writing
  // the reply alone takes seconds.
  for (int i = 0; i < 3000 && server_->stats().open > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_->stats().open, 0);
  // The server still serves others.
  RpcClient other = Connect("node 2");
  auto r = other.Call({{"op", "node_address"}, {"job", "nobody"}, {"node", 0}}, 10s);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
}

}  // namespace
}  // namespace strata::agent
