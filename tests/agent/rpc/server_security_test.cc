// Copyright 2026 The Strata Authors.
//
// What the agent's Server gives anyone before they have authenticated, and
// what it keeps for the node's own callers: the handshake's deadline covers
// the whole handshake; a frame's memory follows the bytes that arrive; the
// local socket serves only callers the agent authorizes by their uid; calls
// named local-only are refused on every network connection.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "agent/rpc/client.h"
#include "agent/rpc/server.h"
#include "component_util.h"
#include "net/auth.h"
#include "net/frame.h"
#include "test_util.h"
#include "util/process.h"

namespace strata::agent {
namespace {

using namespace std::chrono_literals;

constexpr char kSecuritySecret[] = "server-security-secret-0123456789";

class ServerSecurityTest : public ::testing::Test {
 protected:
  // Serves control calls that answer {"done": op}; "wipe" is local-only.
  void StartServer() {
    auto listener = net::Socket::Listen("127.0.0.1", 0, SOMAXCONN);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    endpoint_ = Endpoint{"127.0.0.1", static_cast<uint16_t>(*listener->LocalPort())};
    auto local = net::Socket::ListenLocal(socket_path(), SOMAXCONN, 0666, ::getegid());
    ASSERT_TRUE(local.ok()) << local.status().ToString();
    Server::Options options;
    options.trust = testing::PskTrust(kSecuritySecret);
    options.auth_timeout = auth_timeout_;
    options.reply_timeout = 60s;  // far beyond the handshake's deadline
    options.max_request_bytes = max_request_bytes_;
    options.authorize_local = [this](const net::LocalPeer& peer) {
      return peer.uid == allowed_uid_ ? Status::Ok() : PermissionDeniedError("not this uid");
    };
    options.local_only = [](const json& request) { return request.value("op", "") == "wipe"; };
    Server::Handlers handlers;
    handlers.is_long = [](const std::string&) { return false; };
    handlers.control = [](const json& request, const std::string&, Server::Reply reply) {
      reply(json{{"done", request.value("op", "")}});
    };
    auto server = Server::Start(std::move(*listener), options, handlers, std::move(*local));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::string socket_path() const { return dir_.Sub("agent.sock"); }

  testing::ScratchDir dir_{"server-security"};
  std::unique_ptr<Server> server_;
  Endpoint endpoint_;
  uid_t allowed_uid_ = ::geteuid();
  std::chrono::milliseconds auth_timeout_{5000};
  uint32_t max_request_bytes_ = kMaxControlBytes;
};

// Whoever holds the job's secret may not make a local-only call over the
// network; the node's own caller may, without the secret.
TEST_F(ServerSecurityTest, LocalOnlyCallsAreRefusedOverTheNetwork) {
  StartServer();
  auto peer = RpcClient::Connect(endpoint_, testing::PskTrust(kSecuritySecret), "peer");
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  auto refused = peer->Call({{"op", "wipe"}}, 10s);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("only from this node's own callers"), std::string::npos)
      << refused.status().ToString();
  auto other = peer->Call({{"op", "status"}}, 10s);  // the connection stays usable
  ASSERT_TRUE(other.ok()) << other.status().ToString();

  auto local = RpcClient::ConnectLocal(socket_path(), "strata maintenance");
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  auto wiped = local->Call({{"op", "wipe"}}, 10s);
  ASSERT_TRUE(wiped.ok()) << wiped.status().ToString();
  EXPECT_EQ(wiped->value("done", ""), "wipe");
  EXPECT_GE(server_->stats().local, 1u);
}

// A local caller whose uid the agent does not authorize is closed before a
// byte is read.
TEST_F(ServerSecurityTest, ALocalCallerOfAnotherUidIsRefused) {
  allowed_uid_ = ::geteuid() + 1;
  StartServer();
  auto local = RpcClient::ConnectLocal(socket_path(), "strata status", 5s);
  EXPECT_FALSE(local.ok());
  EXPECT_TRUE(testing::WaitUntil([&] { return server_->stats().refused >= 1; }));
  EXPECT_EQ(server_->stats().authenticated, 0u);
}

// The handshake's deadline holds after the server's CHALLENGE too: a client
// that never sends its PROOF is dropped at the deadline (it used to be given
// the 30 s of a reply), so a slot is held at most auth_timeout.
TEST_F(ServerSecurityTest, AHandshakeStalledAfterTheChallengeIsDropped) {
  auth_timeout_ = 300ms;
  StartServer();
  const net::Trust trust = testing::PskTrust(kSecuritySecret);
  auto socket = net::Socket::Connect(endpoint_.host, endpoint_.port, 5s);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  ASSERT_TRUE(
      socket->StartTls(trust.tls, net::TlsStream::Role::kClient, "", net::DeadlineAfter(5s)).ok());
  net::ClientHandshake handshake(trust.secret, "stalling client", socket->peer());
  auto hello = handshake.Hello();
  ASSERT_TRUE(hello.ok());
  ASSERT_TRUE(net::SendFrame(*socket, net::kFrameHello, *hello, net::DeadlineAfter(5s)).ok());
  auto challenge = net::RecvFrame(*socket, net::kMaxAuthPayload, net::DeadlineAfter(5s));
  ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
  ASSERT_EQ(challenge->type, net::kFrameChallenge);
  // No PROOF. The server closes the connection long before this read's
  // deadline (and the reply timeout) would end the wait.
  char byte;
  Status closed = socket->RecvAll(&byte, 1, net::DeadlineAfter(20s));
  EXPECT_EQ(closed.code(), StatusCode::kUnavailable) << closed.ToString();
}

// Peak resident memory of this process, in KiB, after resetting the peak to
// what is resident now (clear_refs "5").
int64_t ResetPeak() {
  std::ofstream("/proc/self/clear_refs") << "5";
  return ProcessStatus("VmHWM").value_or(-1);
}

// An authenticated caller declares a 1 GiB call (the largest the agent can
// be configured to take) and sends 10 bytes of it: the server holds what
// arrived, not what was declared.
TEST_F(ServerSecurityTest, ADeclaredGigabyteWithTenBytesBehindItCostsLittle) {
  max_request_bytes_ = 1u << 30;
  StartServer();
  auto client = RpcClient::Connect(endpoint_, testing::PskTrust(kSecuritySecret), "big talker");
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const int64_t before = ResetPeak();
  ASSERT_GT(before, 0);
  const auto header = net::EncodeFrameHeader(kFrameCall, 0, 1u << 30);
  std::string bytes(header.data(), header.size());
  bytes += "0123456789";
  ASSERT_TRUE(client->socket().SendAll(bytes.data(), bytes.size(), net::DeadlineAfter(5s)).ok());
  client->socket().Close();  // the server sees the end of the stream and drops the call
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->stats().open == 0; }));
  const int64_t grown_kib = ProcessStatus("VmHWM").value_or(0) - before;
  EXPECT_LT(grown_kib, 64 << 10) << "peak resident memory grew by " << grown_kib << " KiB";
}

}  // namespace
}  // namespace strata::agent
