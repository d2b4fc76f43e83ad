// Copyright 2026 The Strata Authors.
//
// TLS between agents (net/tls.h): the PSK and certificate modes, what a
// wrong secret, an untrusted certificate or a peer of the other kind sees,
// the deadlines through the handshake, and a step's file carried over TLS.
// The tampering tests (a proxy that reads, flips, truncates and replays)
// are in tests/agent/peer/replication_test.cc, against real replication.
#include "net/tls.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "net/auth.h"
#include "net/frame.h"
#include "net/job_key.h"
#include "net/socket.h"
#include "test_pki.h"
#include "test_util.h"

namespace strata::net::tls_test {
namespace {

using namespace std::chrono_literals;

constexpr char kSecret[] = "tls-test-secret-0123456789";

Deadline Soon() { return DeadlineAfter(5s); }

Trust MustTrust(const std::string& secret, const TlsOptions& options) {
  StatusOr<Trust> t = MakeTrust(secret, options);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Trust{};
}

Trust Psk(const std::string& secret = kSecret) { return MustTrust(secret, TlsOptions{}); }

Trust Plaintext() {
  TlsOptions off;
  off.mode = TlsMode::kOff;
  return MustTrust(kSecret, off);
}

bool Has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto listener = Socket::Listen("127.0.0.1", 0, 8);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    listener_ = std::move(*listener);
    port_ = *listener_.LocalPort();
  }

  struct Ends {
    Socket client, server;
    Status client_status;
    StatusOr<std::string> server_id = InternalError("the server did not run");
  };

  // Connects to `host` and secures the connection from both ends at once.
  Ends Secure(const Trust& client, const Trust& server, const std::string& host = "127.0.0.1",
              Deadline deadline = Soon()) {
    Ends e;
    std::thread t([&] {
      auto accepted = listener_.Accept(5s);
      if (!accepted.ok()) return;
      e.server = std::move(*accepted);
      e.server_id = SecureAsServer(e.server, server, deadline);
      if (!e.server_id.ok()) e.server.Close();  // as the agent's server does
    });
    auto socket = Socket::Connect(host, port_, 5s);
    if (socket.ok()) {
      e.client = std::move(*socket);
      e.client_status = SecureAsClient(e.client, client, "node 1", host, deadline);
      if (!e.client_status.ok()) e.client.Close();  // as RpcClient drops it
    } else {
      e.client_status = socket.status();
    }
    t.join();
    return e;
  }

  Socket listener_;
  uint16_t port_ = 0;
};

TEST_F(TlsTest, PskIsTls13AndFramesFlowBothWays) {
  Ends e = Secure(Psk(), Psk());
  ASSERT_TRUE(e.client_status.ok()) << e.client_status.ToString();
  ASSERT_TRUE(e.server_id.ok()) << e.server_id.status().ToString();
  EXPECT_EQ(*e.server_id, "node 1");
  EXPECT_TRUE(e.client.encrypted());
  EXPECT_EQ(e.client.Protection(), "TLSv1.3 TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(e.server.Protection(), "TLSv1.3 TLS_AES_128_GCM_SHA256");
  ASSERT_TRUE(SendFrame(e.client, 16, "{\"op\":\"status\"}", Soon()).ok());
  auto call = RecvFrame(e.server, 1024, Soon());
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(call->payload, "{\"op\":\"status\"}");
  ASSERT_TRUE(SendFrame(e.server, 17, std::string(100000, 'r'), Soon()).ok());
  auto reply = RecvFrame(e.client, 1 << 20, Soon());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->payload, std::string(100000, 'r'));
}

// SendFile and RecvToFile over TLS (no sendfile, no splice): the range
// arrives whole, at its offset.
TEST_F(TlsTest, AFileRangeTravelsWholeOverTls) {
  Ends e = Secure(Psk(), Psk());
  ASSERT_TRUE(e.client_status.ok()) << e.client_status.ToString();
  testing::ScratchDir dir("tls-file");
  const std::vector<uint8_t> data = testing::RandomData(9 << 20, 7);
  testing::WriteFile(dir.Sub("src"), std::string(data.begin(), data.end()));
  const int src = ::open(dir.Sub("src").c_str(), O_RDONLY | O_CLOEXEC);
  const int dst = ::open(dir.Sub("dst").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(src, 0);
  ASSERT_GE(dst, 0);
  constexpr uint64_t kOffset = 12345, kLen = (8 << 20) + 17;
  Status received;
  std::thread t([&] { received = e.server.RecvToFile(dst, 100, kLen, Soon()); });
  Status sent = e.client.SendFile(src, kOffset, kLen, Soon());
  t.join();
  ::close(src);
  ::close(dst);
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  ASSERT_TRUE(received.ok()) << received.ToString();
  const std::string got = testing::ReadFile(dir.Sub("dst"));
  ASSERT_EQ(got.size(), 100 + kLen);
  EXPECT_EQ(std::memcmp(got.data() + 100, data.data() + kOffset, kLen), 0);
}

// A file shorter than the range asked for is DATA_LOSS naming the peer, and
// the stream is not touched (TLS maps the file: past its end would fault).
TEST_F(TlsTest, SendingPastAFilesEndOverTlsIsDataLoss) {
  Ends e = Secure(Psk(), Psk());
  ASSERT_TRUE(e.client_status.ok()) << e.client_status.ToString();
  testing::ScratchDir dir("tls-short");
  testing::WriteFile(dir.Sub("short"), std::string(1000, 's'));
  const int fd = ::open(dir.Sub("short").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  Status s = e.client.SendFile(fd, 500, 1000, Soon());
  ::close(fd);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_TRUE(Has(s, "127.0.0.1:")) << s.ToString();
  EXPECT_TRUE(Has(s, "ends at offset 1000")) << s.ToString();
}

TEST_F(TlsTest, AnotherSecretFailsTheTlsHandshakeOnBothSides) {
  Ends e = Secure(Psk("another-secret-0123456789"), Psk());
  EXPECT_EQ(e.client_status.code(), StatusCode::kPermissionDenied) << e.client_status.ToString();
  EXPECT_TRUE(Has(e.client_status, "TLS handshake with 127.0.0.1:")) << e.client_status.ToString();
  EXPECT_TRUE(Has(e.client_status, "job's secret")) << e.client_status.ToString();
  EXPECT_FALSE(e.server_id.ok());
  EXPECT_EQ(e.server_id.status().code(), StatusCode::kPermissionDenied)
      << e.server_id.status().ToString();
}

// The key is bound to the job: one secret under two job names keys two
// jobs that cannot talk (a guess at a secret, or a secret reused, serves one
// job only). The secret itself never keys a connection.
TEST_F(TlsTest, TheKeyIsBoundToTheJob) {
  StatusOr<Trust> a = MakeTrust(kSecret, TlsOptions{}, "llama");
  StatusOr<Trust> b = MakeTrust(kSecret, TlsOptions{}, "gemma");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->secret.size(), kJobKeyBytes);
  EXPECT_NE(a->secret, b->secret);
  EXPECT_NE(a->secret, kSecret);
  EXPECT_EQ(MakeTrust(kSecret, TlsOptions{}, "llama")->secret, a->secret);
  Ends other = Secure(*a, *b);
  EXPECT_EQ(other.client_status.code(), StatusCode::kPermissionDenied)
      << other.client_status.ToString();
  TlsOptions off;
  off.mode = TlsMode::kOff;  // the handshake inside is keyed alike
  StatusOr<Trust> a_plain = MakeTrust(kSecret, off, "llama");
  StatusOr<Trust> b_plain = MakeTrust(kSecret, off, "gemma");
  Ends plain = Secure(*a_plain, *b_plain);
  EXPECT_EQ(plain.client_status.code(), StatusCode::kPermissionDenied)
      << plain.client_status.ToString();
  Ends same = Secure(*a, *MakeTrust(kSecret, TlsOptions{}, "llama"));
  EXPECT_TRUE(same.client_status.ok()) << same.client_status.ToString();
}

// Agents of one job started with different --tls settings fail with an
// error that says what to check.
TEST_F(TlsTest, APlaintextClientIsRefusedByATlsAgentWithAHint) {
  Ends e = Secure(Plaintext(), Psk());
  EXPECT_FALSE(e.client_status.ok());
  EXPECT_TRUE(Has(e.client_status, "require TLS")) << e.client_status.ToString();
  EXPECT_FALSE(e.server_id.ok());
}

TEST_F(TlsTest, ATlsClientIsRefusedByAPlaintextAgentWithAHint) {
  Ends e = Secure(Psk(), Plaintext());
  EXPECT_FALSE(e.client_status.ok());
  EXPECT_TRUE(Has(e.client_status, "TLS off")) << e.client_status.ToString();
  EXPECT_FALSE(e.server_id.ok());
}

// A server that accepts and never answers holds a client's TLS handshake
// no longer than its deadline.
TEST_F(TlsTest, ASilentPeerCannotHoldTheHandshakePastItsDeadline) {
  auto client = Socket::Connect("127.0.0.1", port_, 5s);
  ASSERT_TRUE(client.ok());
  auto server = listener_.Accept(5s);  // and nothing more
  ASSERT_TRUE(server.ok());
  const auto t0 = std::chrono::steady_clock::now();
  Status s = SecureAsClient(*client, Psk(), "node 1", "127.0.0.1", DeadlineAfter(200ms));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(Has(s, "TLS handshake")) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST_F(TlsTest, SettingsAreCheckedBeforeAnyConnection) {
  EXPECT_EQ(ParseTlsMode("tls1.2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseTlsMode("certificates"), TlsMode::kCertificates);
  TlsOptions psk_with_files;
  psk_with_files.cert_file = "/etc/agent.pem";
  EXPECT_EQ(MakeTrust(kSecret, psk_with_files).status().code(), StatusCode::kInvalidArgument);
  TlsOptions certificates;
  certificates.mode = TlsMode::kCertificates;
  EXPECT_EQ(MakeTrust(kSecret, certificates).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Psk().Describe(), "TLS 1.3 (psk)");
  EXPECT_EQ(Plaintext().Describe(), "plaintext");
}

// ---- Certificates ----

// A CA, an agent certificate it signed for 127.0.0.1 and localhost, one for
// another name, and a second CA with a certificate of its own (trusted by
// nobody here).
class CertificateTest : public TlsTest {
 protected:
  static void SetUpTestSuite() {
    pki_ = new testing::TestPki("tls-pki");
    pki_->MakeCa("ca");
    pki_->MakeCert("agent", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost");
    pki_->MakeCert("elsewhere", "ca", "subjectAltName=DNS:agent-7.example");
    pki_->MakeCa("rogue-ca");
    pki_->MakeCert("rogue", "rogue-ca", "subjectAltName=IP:127.0.0.1");
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }

  static std::string Path(const std::string& name) { return pki_->Path(name); }

  static Trust Certs(const std::string& name, const std::string& ca = "ca") {
    TlsOptions o;
    o.mode = TlsMode::kCertificates;
    o.cert_file = Path(name + ".pem");
    o.key_file = Path(name + ".key");
    o.ca_file = Path(ca + ".pem");
    return MustTrust(kSecret, o);
  }

  static testing::TestPki* pki_;
};

testing::TestPki* CertificateTest::pki_ = nullptr;

TEST_F(CertificateTest, AgentsOfOneCaConnect) {
  Ends e = Secure(Certs("agent"), Certs("agent"));
  ASSERT_TRUE(e.client_status.ok()) << e.client_status.ToString();
  ASSERT_TRUE(e.server_id.ok()) << e.server_id.status().ToString();
  EXPECT_EQ(e.client.Protection().rfind("TLSv1.3 ", 0), 0u) << e.client.Protection();
  Ends by_name = Secure(Certs("agent"), Certs("agent"), "localhost");
  EXPECT_TRUE(by_name.client_status.ok()) << by_name.client_status.ToString();
}

TEST_F(CertificateTest, AClientWithACertificateOfAnotherCaIsRefused) {
  Ends e = Secure(Certs("rogue", "ca"), Certs("agent"));
  EXPECT_FALSE(e.server_id.ok());
  EXPECT_EQ(e.server_id.status().code(), StatusCode::kPermissionDenied)
      << e.server_id.status().ToString();
  EXPECT_FALSE(e.client_status.ok());
}

TEST_F(CertificateTest, AServerWithACertificateOfAnotherCaIsRefused) {
  Ends e = Secure(Certs("agent"), Certs("rogue", "ca"));
  EXPECT_EQ(e.client_status.code(), StatusCode::kPermissionDenied) << e.client_status.ToString();
  EXPECT_TRUE(Has(e.client_status, "certificate")) << e.client_status.ToString();
}

// A certificate the CA signed for another host does not serve this one.
TEST_F(CertificateTest, AServerCertificateForAnotherNameIsRefused) {
  Ends e = Secure(Certs("agent"), Certs("elsewhere"));
  EXPECT_EQ(e.client_status.code(), StatusCode::kPermissionDenied) << e.client_status.ToString();
}

TEST_F(CertificateTest, UnusableFilesAreNamed) {
  TlsOptions o;
  o.mode = TlsMode::kCertificates;
  o.cert_file = Path("missing.pem");
  o.key_file = Path("agent.key");
  o.ca_file = Path("ca.pem");
  Status missing = MakeTrust(kSecret, o).status();
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(missing, "missing.pem")) << missing.ToString();
  o.cert_file = Path("agent.pem");
  o.key_file = Path("rogue.key");
  Status mismatch = MakeTrust(kSecret, o).status();
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(mismatch, "rogue.key")) << mismatch.ToString();
}

}  // namespace
}  // namespace strata::net::tls_test
