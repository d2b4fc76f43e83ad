// Copyright 2026 The Strata Authors.
//
// Replication through a man in the middle (testing::TamperProxy in front of
// node 1; replication_fixture.h): what an eavesdropper sees with TLS on and
// off, and that a byte changed, a stream cut short or a session replayed
// commits nothing and names the peer.
#include "replication_fixture.h"

namespace strata::agent::replication_fixture {
// A namespace of its own, not an anonymous one: in a unity build this file
// shares a compiler run with other tests that define the same helper names.
namespace replication_tamper_test {

// Bytes an eavesdropper would recognize: 1 MiB of a model's "weights".
constexpr std::string_view kMarker = "weights-nobody-on-the-path-may-read:";
constexpr size_t kWeightBytes = 1 << 20;

class TamperTest : public ReplicationTest {
 protected:
  // A proxy in front of node 1; node 0 sends its step 10 through it.
  void SendThroughProxy() {
    const std::string port = receiver_address_.substr(receiver_address_.rfind(':') + 1);
    auto proxy = testing::TamperProxy::Start(std::stoi(port));
    ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
    proxy_ = std::move(*proxy);
    if (arm_) arm_(*proxy_);
    StartSender(proxy_->address());
    std::string weights;
    while (weights.size() < kWeightBytes) weights += kMarker;
    sent_ = IngestFiles(sender_, Key(10), {{"weights.bin", weights}});
    sender_.replication->Enqueue(Key(10));
    sender_.replication->Start();
  }

  // Waits for the failure the attack causes; it names the peer.
  std::string AwaitFailure() {
    EXPECT_TRUE(testing::WaitUntil([&] { return !sender_.replication->progress().error.empty(); }));
    const std::string error = sender_.replication->progress().error;
    EXPECT_NE(error.find("replicating job1/0/10 to node 1"), std::string::npos) << error;
    EXPECT_NE(error.find(proxy_->address()), std::string::npos) << error;
    return error;
  }

  // The retry after an attack, on a clean path, delivers the same step.
  void ExpectTheRetryDelivers() {
    clock_.Advance(1s);
    EXPECT_EQ(Reports(1).front(), 10);
    auto held = receiver_.store->GetIndex(Key(10));
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    EXPECT_EQ(held->digest, sent_.digest);
  }

  std::function<void(testing::TamperProxy&)> arm_;  // the attack, armed before sending
  std::unique_ptr<testing::TamperProxy> proxy_;
  StepIndex sent_;
};

// Everything on the wire is ciphertext: not the weights, not the calls.
TEST_F(TamperTest, AnEavesdropperSeesNoPlaintext) {
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  EXPECT_EQ(Reports(1).front(), 10);
  const std::string wire = proxy_->AllBytes();
  EXPECT_GT(wire.size(), kWeightBytes);
  EXPECT_EQ(wire.find(kMarker.substr(0, 16)), std::string::npos);
  EXPECT_EQ(wire.find("put_step"), std::string::npos);
  EXPECT_EQ(wire.find("weights.bin"), std::string::npos);
  EXPECT_EQ(wire.find("node 0"), std::string::npos);  // the client id, inside TLS
}

// The same eavesdropper on a job that turned TLS off reads the weights:
// the test above would catch a channel that does not encrypt.
TEST_F(TamperTest, WithTlsOffTheEavesdropperReadsTheWeights) {
  server_.reset();
  trust_ = net::Trust{kReplicationSecret, nullptr};
  ServeReceiver();
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  EXPECT_EQ(Reports(1).front(), 10);
  const std::string wire = proxy_->AllBytes();
  EXPECT_NE(wire.find(kMarker), std::string::npos);
  EXPECT_NE(wire.find("put_step"), std::string::npos);
}

// One bit changed in the middle of the step's data: the record fails its
// tag, the connection fails, node 1 commits nothing, and the sender's error
// names the peer. The retry, on a clean path, delivers the step.
TEST_F(TamperTest, AByteChangedInFlightFailsTheCopyAndCommitsNothing) {
  arm_ = [](testing::TamperProxy& p) { p.FlipUpstreamByte(kWeightBytes / 2); };
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  AwaitFailure();
  EXPECT_TRUE(proxy_->flipped());
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
  EXPECT_EQ(adopted_, 0);
  ExpectTheRetryDelivers();
}

// A bit changed in the handshake itself fails the handshake.
TEST_F(TamperTest, AByteChangedInTheHandshakeFailsIt) {
  arm_ = [](testing::TamperProxy& p) { p.FlipUpstreamByte(100); };  // in the ClientHello
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  AwaitFailure();
  EXPECT_EQ(puts_, 0);
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
  ExpectTheRetryDelivers();
}

// The stream cut short in the data: nothing is committed.
TEST_F(TamperTest, AStreamCutShortCommitsNothing) {
  arm_ = [](testing::TamperProxy& p) { p.TruncateUpstreamAfter(kWeightBytes / 3); };
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  AwaitFailure();
  EXPECT_TRUE(proxy_->truncated());
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
  EXPECT_EQ(adopted_, 0);
  ExpectTheRetryDelivers();
}

// What a client sent, captured and replayed on a new connection, reaches
// no handler: the server's fresh handshake keys do not match the recorded
// Finished message.
TEST_F(TamperTest, ARecordedSessionReplayedReachesNoHandler) {
  ASSERT_NO_FATAL_FAILURE(SendThroughProxy());
  EXPECT_EQ(Reports(1).front(), 10);
  const int puts = puts_;
  ASSERT_GE(proxy_->connections(), 1u);
  std::string recorded;  // the connection that carried the step
  for (size_t i = 0; i < proxy_->connections(); ++i) {
    if (proxy_->Upstream(i).size() > recorded.size()) recorded = proxy_->Upstream(i);
  }
  ASSERT_GT(recorded.size(), kWeightBytes);
  ASSERT_TRUE(receiver_.store->Remove(Key(10)).ok());
  auto answer = proxy_->Replay(recorded);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(puts_, puts);
  EXPECT_FALSE(receiver_.store->GetIndex(Key(10)).ok());
}

}  // namespace replication_tamper_test
}  // namespace strata::agent::replication_fixture
