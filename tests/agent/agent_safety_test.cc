// Copyright 2026 The Strata Authors.
//
// Hostile peers against a real `strata agent` process: garbage, wrong
// secrets, forged proofs, truncated, corrupt or oversized streams, path
// traversal, calls that once crashed it. Every wait is a bounded poll.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "agent/rpc/client.h"
#include "agent/store/store.h"
#include "agent_peer.h"
#include "agent_protocol_fixture.h"
#include "cluster.h"
#include "component_util.h"
#include "format/step_index.h"
#include "net/frame.h"
#include "net/socket.h"
#include "util/hash.h"
#include "wire/json.h"

namespace strata::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool LogHas(const Cluster& c, const std::string& text) {
  return WaitUntil([&] { return c.AgentLog(0).find(text) != std::string::npos; });
}

// A TCP connection to node 0's agent: what anyone who reaches the port has.
StatusOr<net::Socket> RawConnect(const Cluster& c) {
  agent::Endpoint e = AgentEndpoint(c);
  return net::Socket::Connect(e.host, e.port, 5s);
}

// A connection through the job's TLS (keyed by its secret) and no further:
// the HMAC handshake inside is the test's to speak, or to break.
StatusOr<net::Socket> TlsConnect(const Cluster& c) {
  STRATA_ASSIGN_OR_RETURN(net::Socket s, RawConnect(c));
  const net::Trust trust = PskTrust(c.secret());
  STRATA_RETURN_IF_ERROR(
      s.StartTls(trust.tls, net::TlsStream::Role::kClient, "127.0.0.1", net::DeadlineAfter(5s)));
  return s;
}

// True if the agent closes the connection within `timeout` (whatever it
// sends first is drained); false if it keeps it open.
bool ClosedByAgent(net::Socket& s, std::chrono::milliseconds timeout = 5s) {
  const net::Deadline deadline = net::DeadlineAfter(timeout);
  char buf[4096];
  for (;;) {
    Status st = s.RecvAll(buf, 1, deadline);
    if (!st.ok()) return st.code() != StatusCode::kDeadlineExceeded;
  }
}

// An index of one file `path` holding `data`.
StepIndex OneFileIndex(const std::string& path, const std::string& data) {
  StepIndex index;
  index.files.push_back({path, data.size(), {Xxh3(data.data(), data.size())}});
  index.total_bytes = data.size();
  index.digest = 0x5eed5eed5eed5eedull;
  return index;
}

std::string Incoming(const Cluster& c) { return c.dir(0) + "/.strata-agent/incoming"; }

// Node 0's agent serves job "j" as node 1 of 2 (starting: node 0 never
// comes), so that the hostile peer's steps j/0/N are a peer's steps of the
// job it serves; any other job's are refused (APeersStepOfAnotherJob...).
class AgentSafetyTest : public AgentProtocolTest {
 protected:
  void SetUp() override {
    AgentProtocolTest::SetUp();
    ServeJob(c_, "j", 1, 2);
  }
  // Its start never completes, so a SIGTERM would drain for the grace
  // period: these tests are about what it refuses, not how it stops.
  void TearDown() override { c_.KillAgent(0); }
};

// ---------------------------------------------------------------------------
// Hostile peers.

TEST_F(AgentSafetyTest, GarbageIsRejectedAndTheAgentKeepsServing) {
  {
    auto s = RawConnect(c_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    const std::string http = "GET / HTTP/1.1\r\n\r\n";
    ASSERT_TRUE(s->SendAll(http.data(), http.size(), net::DeadlineAfter(5s)).ok());
    EXPECT_TRUE(ClosedByAgent(*s));
  }
  {
    auto s = RawConnect(c_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    const std::string junk = RandomBytes(1 << 20, 42);
    s->SendAll(junk.data(), junk.size(), net::DeadlineAfter(5s)).IgnoreError();  // may be reset
    EXPECT_TRUE(ClosedByAgent(*s));
  }
  ASSERT_TRUE(WaitUntil([&] { return Count(c_.AgentLog(0), "rejected connection") >= 2; }))
      << c_.AgentLog(0);
  // TLS comes first: an HTTP request is not a ClientHello.
  EXPECT_NE(c_.AgentLog(0).find("TLS handshake with"), std::string::npos) << c_.AgentLog(0);
  EXPECT_NE(c_.AgentLog(0).find("http request"), std::string::npos) << c_.AgentLog(0);
  // Inside TLS, garbage instead of the HELLO is refused as before.
  {
    auto s = TlsConnect(c_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    const std::string http = "GET / HTTP/1.1\r\n\r\n";
    ASSERT_TRUE(s->SendAll(http.data(), http.size(), net::DeadlineAfter(5s)).ok());
    EXPECT_TRUE(ClosedByAgent(*s));
  }
  ASSERT_TRUE(LogHas(c_, "GET / HTTP/1.1")) << c_.AgentLog(0);
  // A silent connection does not block anyone else.
  auto silent = RawConnect(c_);
  ASSERT_TRUE(silent.ok());
  ExpectServing(c_);
}

TEST_F(AgentSafetyTest, WrongSecretIsRefused) {
  ScratchDir other("other-secret");
  WriteSecretFile(other.Sub("secret"), "a-different-secret-0123456789\n");
  Child status({BinaryPath("strata"), "status", "--agent", c_.address(0), "--secret-file",
                other.Sub("secret"), "--json"});
  EXPECT_NE(status.Wait(20s), 0);
  EXPECT_EQ(status.Stdout(), "");
  EXPECT_NE(status.Stderr().find("secret"), std::string::npos) << status.Stderr();
  // The PSK derived from another secret fails TLS, before any frame.
  ASSERT_TRUE(LogHas(c_, "rejected connection: TLS handshake with")) << c_.AgentLog(0);
  ExpectServing(c_);
}

// An impostor that does not check the server's proof and sends a made-up
// one of its own.
// Inside TLS the HMAC handshake still checks the secret (in certificate
// mode it is the only check of it): a forged proof is refused.
TEST_F(AgentSafetyTest, ForgedProofIsRefused) {
  auto s = TlsConnect(c_);
  ASSERT_TRUE(s.ok());
  const auto deadline = net::DeadlineAfter(5s);
  std::string hello("\x01\x00\x00\x00", 4);
  hello += RandomBytes(32, 1) + "impostor";
  ASSERT_TRUE(net::SendFrame(*s, net::kFrameHello, hello, deadline).ok());
  auto challenge = net::RecvFrame(*s, 1024, deadline);
  ASSERT_TRUE(challenge.ok()) << challenge.status().message();
  EXPECT_EQ(challenge->type, net::kFrameChallenge);
  ASSERT_TRUE(net::SendFrame(*s, net::kFrameProof, RandomBytes(32, 2), deadline).ok());
  auto answer = net::RecvFrame(*s, 1024, deadline);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(answer->type, net::kFrameError);
  EXPECT_EQ(answer->payload, "authentication failed");
  // No call is served on that connection.
  net::SendFrame(*s, agent::kFrameCall, R"({"op":"status"})", deadline).IgnoreError();
  EXPECT_TRUE(ClosedByAgent(*s));
  ASSERT_TRUE(LogHas(c_, "could not prove it knows the job secret")) << c_.AgentLog(0);
  ExpectServing(c_);
}

// The control for the tests below: a well-formed transfer is committed.
TEST_F(AgentSafetyTest, WellFormedPutStepIsCommitted) {
  const std::string data = RandomBytes(1 << 20, 3);
  auto client = PeerConnect(c_);
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto ready =
      client->Call(PutStep(Key("j", 0, 7), StepIndexToJson(OneFileIndex("data.bin", data))), 10s);
  ASSERT_TRUE(ready.ok()) << ready.status().message();
  EXPECT_EQ(ready->value("have", true), false);
  ASSERT_TRUE(client->socket().SendAll(data.data(), data.size(), net::DeadlineAfter(10s)).ok());
  auto ack = net::RecvFrame(client->socket(), 1 << 20, net::DeadlineAfter(10s));
  ASSERT_TRUE(ack.ok()) << ack.status().message();
  EXPECT_EQ(json::parse(ack->payload, nullptr, false).value("committed", false), true)
      << ack->payload;
  EXPECT_TRUE(Holds(c_.Status(0), "j", 0, 7));
  EXPECT_EQ(ReadFile(c_.dir(0) + "/.strata-agent/steps/j/0/7/data.bin"), data);
}

// A peer's step of a job this agent does not serve, or of this node's own
// rank (node 1 of j here), is refused before a byte of it is taken.
TEST_F(AgentSafetyTest, StepsOfAnotherJobOrOfThisNodesRankAreRefused) {
  const std::string data = RandomBytes(1000, 6);
  const json index = StepIndexToJson(OneFileIndex("data.bin", data));
  auto client = PeerConnect(c_);
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto other = client->Call(PutStep(Key("other", 0, 7), index), 10s);
  EXPECT_EQ(other.status().code(), StatusCode::kUnavailable) << other.status().ToString();
  EXPECT_NE(other.status().message().find("serves no incarnation of job other"), std::string::npos)
      << other.status().ToString();
  auto own = client->Call(PutStep(Key("j", 1, 7), index), 10s);
  EXPECT_EQ(own.status().code(), StatusCode::kPermissionDenied) << own.status().ToString();
  EXPECT_TRUE(c_.Status(0)["steps"].empty());
  EXPECT_EQ(EntriesIn(Incoming(c_)), 0u);
}

// The agent's local socket: a local user outside the job's group cannot
// even reach it (the agent's directory is 0750, the socket 0660, both of
// the job's group); one in the group can, without the secret.
TEST_F(AgentSafetyTest, TheLocalSocketServesTheJobsGroupOnly) {
  std::string why;
  auto user = testing::UnprivilegedUser(&why);
  if (!user) GTEST_SKIP() << why;
  std::string out;
  EXPECT_NE(
      testing::Run(user->Command({BinaryPath("strata"), "status", "--agent", c_.socket(0)}), &out),
      0);
  EXPECT_NE(out.find("ermission denied"), std::string::npos) << out;
  EXPECT_EQ(testing::Run({BinaryPath("strata"), "status", "--agent", c_.socket(0), "--json"}, &out),
            0)
      << out;  // root: the agent's user
  // The job's group is the local directory's: make it the user's.
  c_.KillAgent(0);  // no drain (see TearDown); its stale socket is replaced
  ASSERT_EQ(::chown(c_.dir(0).c_str(), 0, user->gid), 0);
  c_.StartAgent(0);
  EXPECT_EQ(
      testing::Run(
          user->Command({BinaryPath("strata"), "status", "--agent", c_.socket(0), "--json"}), &out),
      0)
      << out;
}

TEST_F(AgentSafetyTest, TruncatedStreamLeavesNothingBehind) {
  const std::string data = RandomBytes(1 << 20, 4);
  {
    auto client = PeerConnect(c_);
    ASSERT_TRUE(client.ok()) << client.status().message();
    auto ready =
        client->Call(PutStep(Key("j", 0, 7), StepIndexToJson(OneFileIndex("data.bin", data))), 10s);
    ASSERT_TRUE(ready.ok()) << ready.status().message();
    ASSERT_EQ(ready->value("have", true), false);
    ASSERT_TRUE(client->socket().SendAll(data.data(), 1000, net::DeadlineAfter(5s)).ok());
  }  // closed after 1000 of 1048576 bytes
  ASSERT_TRUE(LogHas(c_, "receiving j/0/7")) << c_.AgentLog(0);
  EXPECT_TRUE(WaitUntil([&] { return EntriesIn(Incoming(c_)) == 0; }))
      << EntriesIn(Incoming(c_)) << " entries left in " << Incoming(c_);
  EXPECT_FALSE(Holds(c_.Status(0), "j", 0, 7));
  EXPECT_FALSE(Exists(c_.dir(0) + "/.strata-agent/steps/j/0/7"));
  ExpectServing(c_);
}

TEST_F(AgentSafetyTest, CorruptStreamIsRejected) {
  const std::string data = RandomBytes(1 << 20, 5);
  auto client = PeerConnect(c_);
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto ready =
      client->Call(PutStep(Key("j", 0, 7), StepIndexToJson(OneFileIndex("data.bin", data))), 10s);
  ASSERT_TRUE(ready.ok()) << ready.status().message();
  std::string corrupt = data;
  corrupt[12345] ^= 1;
  ASSERT_TRUE(
      client->socket().SendAll(corrupt.data(), corrupt.size(), net::DeadlineAfter(10s)).ok());
  auto reply = net::RecvFrame(client->socket(), 1 << 20, net::DeadlineAfter(10s));
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  Status s = wire::StatusFromJson(json::parse(reply->payload, nullptr, false), "agent");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  EXPECT_FALSE(Holds(c_.Status(0), "j", 0, 7));
  EXPECT_TRUE(WaitUntil([&] { return EntriesIn(Incoming(c_)) == 0; }));
  EXPECT_FALSE(Exists(c_.dir(0) + "/.strata-agent/steps/j/0/7"));
}

TEST_F(AgentSafetyTest, HostileNamesAreRefused) {
  const std::string dir = c_.dir(0);
  const std::string data = "0123456789";
  const json good_index = StepIndexToJson(OneFileIndex("data.bin", data));
  struct Case {
    json key;
    std::string path;  // of the index's one file
    std::string reason;
  };
  const std::string abs = "/tmp/strata-escape-" + std::to_string(::getpid());
  const std::vector<Case> cases = {
      {Key("../../etc", 0, 7), "data.bin", "job name"},
      {Key("..", 0, 7), "data.bin", "job name"},
      {Key("a/b", 0, 7), "data.bin", "job name"},
      {Key("", 0, 7), "data.bin", "job name"},
      {Key("j", -1, 7), "data.bin", "rank"},
      {Key("j", 0, -7), "data.bin", "step"},
      {Key("j", 0, 7), "../../escape", "unsafe relative path"},
      {Key("j", 0, 7), "../../../escape", "unsafe relative path"},
      {Key("j", 0, 7), "../../../../escape", "unsafe relative path"},
      {Key("j", 0, 7), "a/../../../../escape", "unsafe relative path"},
      {Key("j", 0, 7), abs, "unsafe relative path"},
      {Key("j", 0, 7), "a//b", "unsafe relative path"},
      {Key("j", 0, 7), ".", "unsafe relative path"},
      {Key("j", 0, 7), std::string("a\0b", 3), "unsafe relative path"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.key.dump() + " " + json(k.path).dump());
    json index = good_index;
    index["files"][0]["path"] = k.path;
    auto client = PeerConnect(c_);
    ASSERT_TRUE(client.ok()) << client.status().message();
    auto reply = client->Call(PutStep(k.key, index), 10s);
    ASSERT_FALSE(reply.ok()) << reply->dump();
    EXPECT_NE(reply.status().message().find(k.reason), std::string::npos)
        << reply.status().message();
    // Had it said "send", these bytes would be written somewhere.
    client->socket().SendAll(data.data(), data.size(), net::DeadlineAfter(1s)).IgnoreError();
  }
  for (const std::string& p :
       {dir + "/.strata-agent/incoming/escape", dir + "/.strata-agent/escape", dir + "/escape",
        dir + "/../escape", dir + "/../../escape", dir + "/etc", dir + "/.strata-agent/etc",
        dir + "/../etc", abs, dir + "/.strata-agent/steps/a"}) {
    EXPECT_FALSE(Exists(p)) << p;
  }
  EXPECT_EQ(EntriesIn(dir + "/.strata-agent/steps"), 0u);
  EXPECT_TRUE(WaitUntil([&] { return EntriesIn(Incoming(c_)) == 0; }));
  EXPECT_EQ(c_.Status(0)["steps"].size(), 0u);
  ExpectServing(c_);
}

TEST_F(AgentSafetyTest, OversizedMessagesAreRejected) {
  // After authenticating: a call frame announcing 2 GiB.
  {
    auto client = PeerConnect(c_);
    ASSERT_TRUE(client.ok()) << client.status().message();
    const auto h = net::EncodeFrameHeader(agent::kFrameCall, 0, 2u << 30);
    ASSERT_TRUE(client->socket().SendAll(h.data(), h.size(), net::DeadlineAfter(5s)).ok());
    EXPECT_TRUE(ClosedByAgent(client->socket()));
  }
  ASSERT_TRUE(LogHas(c_, "2.0 GiB message")) << c_.AgentLog(0);
  EXPECT_NE(c_.AgentLog(0).find("the limit is 16 MiB"), std::string::npos) << c_.AgentLog(0);
  // Before authenticating: a HELLO announcing 2 GiB.
  {
    auto s = TlsConnect(c_);
    ASSERT_TRUE(s.ok());
    const auto h = net::EncodeFrameHeader(net::kFrameHello, 0, 2u << 30);
    ASSERT_TRUE(s->SendAll(h.data(), h.size(), net::DeadlineAfter(5s)).ok());
    EXPECT_TRUE(ClosedByAgent(*s));
  }
  ASSERT_TRUE(LogHas(c_, "the limit is 1.0 KiB")) << c_.AgentLog(0);
  ExpectServing(c_);
}

TEST_F(AgentSafetyTest, MalformedCallsGetAnErrorAndTheConnectionStaysUsable) {
  auto client = PeerConnect(c_);
  ASSERT_TRUE(client.ok()) << client.status().message();
  const auto deadline = net::DeadlineAfter(10s);
  for (const std::string payload : {"not json", "[1, 2]", "{\"op\": \"no-such-op\"}"}) {
    SCOPED_TRACE(payload);
    ASSERT_TRUE(net::SendFrame(client->socket(), agent::kFrameCall, payload, deadline).ok());
    auto reply = net::RecvFrame(client->socket(), 1 << 20, deadline);
    ASSERT_TRUE(reply.ok()) << reply.status().message();
    json j = json::parse(reply->payload, nullptr, false);
    EXPECT_EQ(j.value("ok", true), false) << reply->payload;
    EXPECT_FALSE(j.value("error", "").empty()) << reply->payload;
  }
  // Garbage after authenticating closes the connection.
  auto status = client->Call({{"op", "status"}}, 10s);
  EXPECT_TRUE(status.ok()) << status.status().message();
  const std::string junk = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_TRUE(client->socket().SendAll(junk.data(), junk.size(), deadline).ok());
  EXPECT_TRUE(ClosedByAgent(client->socket()));
  ASSERT_TRUE(LogHas(c_, "garbage from")) << c_.AgentLog(0);
  ExpectServing(c_);
}

// Sends one call as an authenticated peer; the agent must answer with an
// error and keep serving.
void ExpectRefusedWithoutCrashing(const Cluster& c, const json& call) {
  auto client = PeerConnect(c);
  ASSERT_TRUE(client.ok()) << client.status().message();
  auto reply = client->Call(call, 10s);
  EXPECT_FALSE(reply.ok());
  // An error reply, not a dropped connection.
  EXPECT_EQ(reply.status().message().find("connection closed"), std::string::npos)
      << reply.status().message();
  ExpectServing(c);
}

// A call whose "op" is not a string is refused and the agent serves on.
// It once ended the agent: reading "op" with json::value() threw
// nlohmann::json::type_error (302) on the connection thread, where nothing
// caught it.
TEST_F(AgentSafetyTest, NonStringOpDoesNotCrashTheAgent) {
  ExpectRefusedWithoutCrashing(c_, {{"op", 42}});
}

// The same for a registration whose "address" is a number: it once threw
// the same uncaught json::type_error in the coordinator's registration.
// Peer input is now read through wire's codecs, which answer an error.
TEST_F(AgentSafetyTest, NonStringAddressDoesNotCrashTheCoordinator) {
  ExpectRefusedWithoutCrashing(
      c_, {{"op", "register"}, {"job", "x"}, {"nodes", 1}, {"node", 0}, {"dp", 1}, {"address", 5}});
}

// A put_step whose "index" is deeply nested JSON (1M levels, a 2 MB
// message, well under the 16 MiB limit) is answered, and the agent serves
// on. It once overflowed the connection thread's stack: copying and
// re-serialising the value recursed once per level in nlohmann::json. A
// message nested past the bound is now refused whole as it is parsed
// (util/json_bounded.h).
TEST_F(AgentSafetyTest, DeeplyNestedIndexDoesNotCrashTheAgent) {
  const int depth = 1 << 20;
  std::string payload = R"({"op":"put_step","key":{"job":"j","rank":0,"step":7},"index":)" +
                        std::string(depth, '[') + std::string(depth, ']') + "}";
  auto client = PeerConnect(c_);
  ASSERT_TRUE(client.ok()) << client.status().message();
  const auto deadline = net::DeadlineAfter(10s);
  ASSERT_TRUE(net::SendFrame(client->socket(), agent::kFrameCall, payload, deadline).ok());
  auto reply = net::RecvFrame(client->socket(), 1 << 20, deadline);
  EXPECT_TRUE(reply.ok()) << reply.status().message();
  ExpectServing(c_);
}

// A client's own links are never followed by the cleanup: a symlink named
// like a step (or a renamed marker) pointing outside the directory loses
// the link, not the target.
TEST_F(AgentSafetyTest, CleanupDoesNotFollowSymlinksOutOfTheDirectory) {
  const std::string dir = c_.dir(0);
  ScratchDir outside("outside");
  WriteFile(outside.Sub("precious"), "keep me");
  for (const std::string name : {"12", "step=3", "9.orbax-checkpoint-tmp", "j-s4-n0-w0.restore"}) {
    ASSERT_EQ(::symlink(outside.path().c_str(), (dir + "/" + name).c_str()), 0) << name;
  }
  Handshake(dir, "j", 0);
  for (const std::string name : {"12", "step=3", "9.orbax-checkpoint-tmp", "j-s4-n0-w0.restore"}) {
    EXPECT_FALSE(Exists(dir + "/" + name)) << name;
  }
  EXPECT_EQ(ReadFile(outside.Sub("precious")), "keep me");
  // A committed step holding a symlink out of the directory is refused
  // (reported to the client), and the target is left alone.
  fs::create_directory(dir + "/20.orbax-checkpoint-tmp");
  WriteFile(dir + "/20.orbax-checkpoint-tmp/ok", "data");
  ASSERT_EQ(
      ::symlink(outside.Sub("precious").c_str(), (dir + "/20.orbax-checkpoint-tmp/evil").c_str()),
      0);
  ASSERT_EQ(::rename((dir + "/20.orbax-checkpoint-tmp").c_str(), (dir + "/20").c_str()), 0);
  ASSERT_TRUE(WaitUntil([&] { return Exists(dir + "/replicator.errors"); })) << c_.AgentLog(0);
  EXPECT_NE(ReadFile(dir + "/replicator.errors").find("evil"), std::string::npos)
      << ReadFile(dir + "/replicator.errors");
  EXPECT_FALSE(Holds(c_.Status(0), "j", 0, 20));
  EXPECT_EQ(ReadFile(outside.Sub("precious")), "keep me");
  ExpectServing(c_);
}

}  // namespace
}  // namespace strata::testing
