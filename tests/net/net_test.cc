// Copyright 2026 The Strata Authors.
//
// net/: sockets, frames and the handshake over loopback, with both ends in
// this process (the far end on a thread). Hostile peers are written by hand
// from raw bytes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "net/auth.h"
#include "net/cancellation.h"
#include "net/frame.h"
#include "net/handshake_budget.h"
#include "net/socket.h"
#include "test_util.h"
#include "util/hash.h"
#include "util/process.h"

namespace strata::net {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kLimit = 64 << 20;

Deadline Soon() { return DeadlineAfter(30s); }

std::string Pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s[i] = static_cast<char>(x >> 56);
  }
  return s;
}

// A file of `size` pseudo-random bytes; returns the open descriptor.
int MakeFile(const std::string& path, size_t size) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0) << path;
  const std::string chunk = Pattern(1 << 20, 7);
  for (size_t off = 0; off < size; off += chunk.size()) {
    // Vary each chunk so a misplaced chunk changes the hash.
    std::string c = chunk;
    std::memcpy(c.data(), &off, sizeof off);
    size_t n = std::min(chunk.size(), size - off);
    EXPECT_EQ(::pwrite(fd, c.data(), n, off), static_cast<ssize_t>(n));
  }
  return fd;
}

std::string ReadRange(int fd, uint64_t offset, size_t n) {
  std::string s(n, '\0');
  EXPECT_EQ(::pread(fd, s.data(), n, offset), static_cast<ssize_t>(n));
  return s;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A frame sent on `from` arrives whole on `to`.
void ExpectFrameCrosses(Socket& from, Socket& to, const std::string& payload) {
  ASSERT_TRUE(SendFrame(from, 20, payload, Soon()).ok());
  auto frame = RecvFrame(to, kLimit, Soon());
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_EQ(frame->payload, payload);
}

// A connected pair over 127.0.0.1: client_ (made by Connect) and server_
// (made by Accept).
class Loopback : public ::testing::Test {
 protected:
  void SetUp() override {
    auto listener = Socket::Listen("127.0.0.1", 0, 8);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    listener_ = std::move(*listener);
    auto port = listener_.LocalPort();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
    auto client = Socket::Connect("127.0.0.1", port_, 5s);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
    auto server = listener_.Accept(5s);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  void SendRaw(std::string_view bytes) {
    ASSERT_TRUE(client_.SendAll(bytes.data(), bytes.size(), Soon()).ok());
  }

  Socket listener_, client_, server_;
  uint16_t port_ = 0;
};

using NetTest = Loopback;
using FrameTest = Loopback;
using AuthTest = Loopback;

// ---- Sockets ----

TEST_F(NetTest, PeerNamesTheOtherEnd) {
  EXPECT_EQ(client_.peer(), "127.0.0.1:" + std::to_string(port_));
  auto client_port = client_.LocalPort();
  ASSERT_TRUE(client_port.ok());
  EXPECT_EQ(server_.peer(), "127.0.0.1:" + std::to_string(*client_port));
}

TEST_F(NetTest, ConnectToClosedPortIsUnavailable) {
  listener_.Close();
  auto s = Socket::Connect("127.0.0.1", port_, 5s);
  ASSERT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().ToString();
  EXPECT_NE(s.status().message().find("connect to 127.0.0.1:" + std::to_string(port_)),
            std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("refused"), std::string::npos) << s.status().message();
}

TEST_F(NetTest, ListenOnAPortInUseIsFailedPrecondition) {
  auto s = Socket::Listen("127.0.0.1", port_, 8);
  ASSERT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("bind 127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << s.status().message();
}

TEST_F(NetTest, AcceptTimesOutSoALoopCanCheckAStopFlag) {
  auto start = Clock::now();
  auto s = listener_.Accept(100ms);
  ASSERT_EQ(s.status().code(), StatusCode::kDeadlineExceeded) << s.status().ToString();
  EXPECT_NE(s.status().message().find("accept on " + listener_.peer()), std::string::npos);
  EXPECT_GE(Seconds(start), 0.09);
}

TEST_F(NetTest, SilentPeerTimesOut) {
  auto start = Clock::now();
  auto frame = RecvFrame(server_, kLimit, DeadlineAfter(200ms));
  ASSERT_EQ(frame.status().code(), StatusCode::kDeadlineExceeded) << frame.status().ToString();
  EXPECT_NE(frame.status().message().find("timed out receiving from " + server_.peer() +
                                          " after 0 of 16 bytes"),
            std::string::npos)
      << frame.status().message();
  EXPECT_GE(Seconds(start), 0.19);
  EXPECT_LT(Seconds(start), 5);
}

TEST_F(NetTest, AStallLimitEndsAReceiveFromAPeerGoneSilentLongBeforeItsDeadline) {
  server_.set_stall_limit(200ms);
  SendRaw("12345678");  // half, then nothing
  auto start = Clock::now();
  char buf[16];
  Status s = server_.RecvAll(buf, sizeof buf, Soon());
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("timed out receiving from " + server_.peer() +
                             " after 8 of 16 bytes: no byte moved for 200 ms"),
            std::string::npos)
      << s.message();
  EXPECT_GE(Seconds(start), 0.19);
  EXPECT_LT(Seconds(start), 5);
}

TEST_F(NetTest, AStallLimitEndsASendToAPeerThatStoppedReading) {
  client_.set_stall_limit(200ms);
  const std::string chunk(64 << 20, 'x');  // more than the socket buffers hold
  Status s = client_.SendAll(chunk.data(), chunk.size(), Soon());
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("no byte moved for 200 ms"), std::string::npos) << s.message();
}

TEST_F(NetTest, ATransferThatKeepsMovingRunsPastItsStallLimit) {
  {
    const StallLimitScope stall(server_, 300ms);
    std::thread trickle([&] {
      for (int i = 0; i < 10; ++i) {  // a byte every 100 ms: a second in all
        std::this_thread::sleep_for(100ms);
        SendRaw("x");
      }
    });
    char buf[10];
    Status s = server_.RecvAll(buf, sizeof buf, Soon());
    trickle.join();
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(server_.stall_limit(), 300ms);
  }
  EXPECT_EQ(server_.stall_limit(), 0ms);  // the scope put the one before it back
}

TEST_F(NetTest, SendToAClosedPeerFailsWithoutSigpipe) {
  server_.Close();
  const std::string chunk(1 << 20, 'x');
  Status s;
  for (int i = 0; i < 50 && s.ok(); ++i) s = client_.SendAll(chunk.data(), chunk.size(), Soon());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("sending to " + client_.peer()), std::string::npos) << s.message();
}

TEST_F(NetTest, ShutdownFromAnotherThreadWakesABlockedReceive) {
  auto start = Clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    server_.Shutdown();
  });
  char byte;
  Status s = server_.RecvAll(&byte, 1, Soon());
  stopper.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_LT(Seconds(start), 5);
}

// A cancelled ticket's registered socket is aborted: a receive blocked on it
// in another thread returns, and the far end's receive fails.
TEST_F(NetTest, CancelEndsATransferRegisteredForAnEarlierTicket) {
  Cancellation cancellation;
  const Cancellation::Ticket ticket = cancellation.Take();
  EXPECT_FALSE(ticket.cancelled());
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    cancellation.Cancel();
  });
  char byte;
  Status s;
  {
    const Cancellation::Registration registered(ticket, client_);
    s = client_.RecvAll(&byte, 1, Soon());
  }
  canceller.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_TRUE(ticket.cancelled());
  EXPECT_FALSE(cancellation.Take().cancelled());         // work begun after it goes on
  EXPECT_FALSE(server_.RecvAll(&byte, 1, Soon()).ok());  // and the far end's fails
}

// A socket registered for a ticket cancelled before is aborted as it
// registers; one of a later ticket, or of none, is left alone.
TEST_F(NetTest, ASocketRegisteredAfterItsTicketWasCancelledIsAbortedAtOnce) {
  Cancellation cancellation;
  const Cancellation::Ticket past = cancellation.Take();
  cancellation.Cancel();
  {
    const Cancellation::Registration none(Cancellation::Ticket(), server_);
    const Cancellation::Registration current(cancellation.Take(), server_);
    cancellation.Take();  // taking a ticket cancels nothing
    SendRaw("x");
    char byte = 0;
    ASSERT_TRUE(server_.RecvAll(&byte, 1, Soon()).ok());
    EXPECT_EQ(byte, 'x');
  }
  const Cancellation::Registration registered(past, client_);
  const std::string chunk(1 << 20, 'x');
  EXPECT_FALSE(client_.SendAll(chunk.data(), chunk.size(), Soon()).ok());
}

TEST_F(NetTest, ClosedSocketIsFailedPrecondition) {
  client_.Close();
  char byte = 0;
  Status s = client_.SendAll(&byte, 1, Soon());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(port_)), std::string::npos);
}

TEST(NetIpv6Test, LoopbackRoundTrip) {
  auto listener = Socket::Listen("::1", 0, 4);
  if (!listener.ok()) GTEST_SKIP() << "no IPv6 loopback: " << listener.status().ToString();
  auto port = listener->LocalPort();
  ASSERT_TRUE(port.ok());
  auto client = Socket::Connect("::1", *port, 5s);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ(client->peer(), "[::1]:" + std::to_string(*port));
  auto server = listener->Accept(5s);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ExpectFrameCrosses(*client, *server, "over v6");
}

// A socket file whose path is longer than sun_path holds is reached
// through its directory; the directory's descriptor does not outlive the
// call (no descriptor is left open by a listen or a connect).
TEST(NetLocalTest, ALongSocketPathIsReachedThroughItsDirectory) {
  testing::ScratchDir dir("net-local");
  std::string deep = dir.path();
  while (deep.size() < 150) deep += "/" + std::string(40, 'd');
  std::filesystem::create_directories(deep);
  const std::string path = deep + "/agent.sock";
  ASSERT_GT(path.size(), sizeof(sockaddr_un::sun_path));
  auto open_fds = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator());
  };
  const auto before = open_fds();
  auto listener = Socket::ListenLocal(path, 4, 0600, ::getegid());
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  EXPECT_TRUE(std::filesystem::is_socket(path));
  auto client = Socket::ConnectLocal(path, 5s);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = listener->Accept(5s);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ExpectFrameCrosses(*client, *server, "by a long name");
  EXPECT_EQ(open_fds(), before + 3);  // the listener, the client and the accepted end
}

// ---- Bulk data: SendFile / RecvToFile ----

TEST_F(NetTest, SendFileToRecvToFile64MiBOnTmpfs) {
  testing::ScratchDir dir("net");
  constexpr size_t kSize = 64 << 20;
  int src = MakeFile(dir.Sub("src"), kSize);
  int dst = ::open(dir.Sub("dst").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(dst, 0);
  Status sent;
  std::thread sender([&] { sent = client_.SendFile(src, 0, kSize, Soon()); });
  Status received = server_.RecvToFile(dst, 0, kSize, Soon());
  sender.join();
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  ASSERT_TRUE(received.ok()) << received.ToString();
  std::string a = ReadRange(src, 0, kSize), b = ReadRange(dst, 0, kSize);
  EXPECT_EQ(Xxh3(a.data(), a.size()), Xxh3(b.data(), b.size()));
  EXPECT_EQ(::lseek(dst, 0, SEEK_END), static_cast<off_t>(kSize));
  ::close(src);
  ::close(dst);
}

TEST_F(NetTest, SendFileFallbackCopiesTheRequestedRangeToTheRequestedOffset) {
  testing::ScratchDir dir("net");
  int src = MakeFile(dir.Sub("src"), 8 << 20);
  int dst = ::open(dir.Sub("dst").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  constexpr uint64_t kFrom = 12345, kLen = (5 << 20) + 7, kTo = 999;
  for (int path = 0; path < 4; ++path) {  // sendfile or copy, splice or recv
    const bool use_sendfile = (path & 1) != 0, use_splice = (path & 2) != 0;
    internal::DisableSendfileForTesting(!use_sendfile);
    internal::DisableSpliceForTesting(!use_splice);
    ASSERT_EQ(::ftruncate(dst, 0), 0);
    Status sent;
    std::thread sender([&] { sent = client_.SendFile(src, kFrom, kLen, Soon()); });
    Status received = server_.RecvToFile(dst, kTo, kLen, Soon());
    sender.join();
    internal::DisableSendfileForTesting(false);
    internal::DisableSpliceForTesting(false);
    ASSERT_TRUE(sent.ok()) << sent.ToString();
    ASSERT_TRUE(received.ok()) << received.ToString();
    EXPECT_TRUE(ReadRange(src, kFrom, kLen) == ReadRange(dst, kTo, kLen)) << path;
    EXPECT_EQ(::lseek(dst, 0, SEEK_END), static_cast<off_t>(kTo + kLen)) << path;
  }
  ::close(src);
  ::close(dst);
}

TEST_F(NetTest, SendFileOfAShortFileIsDataLoss) {
  testing::ScratchDir dir("net");
  int src = MakeFile(dir.Sub("src"), 1000);
  for (bool use_sendfile : {true, false}) {
    internal::DisableSendfileForTesting(!use_sendfile);
    Status s = client_.SendFile(src, 0, 5000, Soon());
    internal::DisableSendfileForTesting(false);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("after 1000 of 5000 bytes"), std::string::npos) << s.message();
  }
  ::close(src);
}

TEST_F(NetTest, RecvToFileFromAPeerThatClosesEarlyIsUnavailable) {
  testing::ScratchDir dir("net");
  int dst = ::open(dir.Sub("dst").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SendRaw(Pattern(1000, 1));
  client_.Close();
  Status s = server_.RecvToFile(dst, 0, 5000, Soon());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("connection closed by " + server_.peer() + " after 1000 of 5000"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(ReadRange(dst, 0, 1000), Pattern(1000, 1));  // what arrived was written
  ::close(dst);
}

// ---- Frames ----

TEST_F(FrameTest, RoundTripsPayloadsOfEverySize) {
  const std::vector<size_t> sizes = {0, 1, 64 << 10, 8 << 20};
  Status sent;
  std::thread sender([&] {
    for (size_t i = 0; i < sizes.size() && sent.ok(); ++i) {
      sent = SendFrame(client_, static_cast<uint16_t>(16 + i), Pattern(sizes[i], i), Soon(),
                       static_cast<uint16_t>(0x8000 | i));
    }
  });
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto frame = RecvFrame(server_, kLimit, Soon());
    ASSERT_TRUE(frame.ok()) << frame.status().ToString();
    EXPECT_EQ(frame->type, 16 + i);
    EXPECT_EQ(frame->flags, 0x8000 | i);
    EXPECT_EQ(frame->payload.size(), sizes[i]);
    EXPECT_TRUE(frame->payload == Pattern(sizes[i], i)) << sizes[i];
  }
  sender.join();
  EXPECT_TRUE(sent.ok()) << sent.ToString();
}

TEST_F(FrameTest, OversizedFrameIsRejectedWithoutAllocatingIt) {
  const auto header = EncodeFrameHeader(kFirstAgentFrameType, 0, 0x80000000u);
  SendRaw(std::string_view(header.data(), header.size()));
  const int64_t rss_before = ProcessStatus("VmHWM").value_or(-1);
  auto start = Clock::now();
  auto frame = RecvFrame(server_, kLimit, Soon());
  EXPECT_LT(Seconds(start), 2) << "it waited for the payload";
  EXPECT_LT(ProcessStatus("VmHWM").value_or(-1) - rss_before, 512 << 10)
      << "it allocated the announced payload";
  ASSERT_EQ(frame.status().code(), StatusCode::kInvalidArgument) << frame.status().ToString();
  EXPECT_NE(frame.status().message().find(server_.peer() +
                                          " sent a 2.0 GiB message (frame type 16); the limit "
                                          "is 64 MiB"),
            std::string::npos)
      << frame.status().message();
}

TEST_F(FrameTest, GarbageIsRejectedNamingThePeer) {
  SendRaw("GET / HTTP/1.1\r\nHost: agent\r\n\r\n");
  auto frame = RecvFrame(server_, kLimit, Soon());
  ASSERT_EQ(frame.status().code(), StatusCode::kInvalidArgument) << frame.status().ToString();
  EXPECT_NE(frame.status().message().find("garbage from " + server_.peer()), std::string::npos)
      << frame.status().message();
  EXPECT_NE(frame.status().message().find(R"("GET / HTTP/1.1\r\n")"), std::string::npos)
      << frame.status().message();
}

TEST_F(FrameTest, CorruptHeaderIsDataLoss) {
  auto header = EncodeFrameHeader(17, 0, 100);
  header[9] ^= 0x04;  // length 100 -> 1124
  SendRaw(std::string_view(header.data(), header.size()));
  auto frame = RecvFrame(server_, kLimit, Soon());
  ASSERT_EQ(frame.status().code(), StatusCode::kDataLoss) << frame.status().ToString();
  EXPECT_NE(frame.status().message().find("corrupt frame header from " + server_.peer()),
            std::string::npos)
      << frame.status().message();
}

TEST_F(FrameTest, TruncatedPayloadIsUnavailableAndSaysHowMuchArrived) {
  const auto header = EncodeFrameHeader(17, 0, 1000);
  SendRaw(std::string(header.data(), header.size()) + Pattern(300, 2));
  client_.Close();
  auto frame = RecvFrame(server_, kLimit, Soon());
  ASSERT_EQ(frame.status().code(), StatusCode::kUnavailable) << frame.status().ToString();
  EXPECT_NE(frame.status().message().find("connection closed by " + server_.peer() +
                                          " after 300 of 1000 bytes"),
            std::string::npos)
      << frame.status().message();
}

TEST(FrameFormatTest, HeaderLayoutAndSizes) {
  const auto h = EncodeFrameHeader(0x1234, 0x5678, 0x9abcdef0);
  EXPECT_EQ(std::string(h.data(), 4), "STRF");
  EXPECT_EQ(static_cast<unsigned char>(h[4]), 0x34);
  EXPECT_EQ(static_cast<unsigned char>(h[8]), 0xf0);
  uint32_t checksum;
  std::memcpy(&checksum, h.data() + 12, 4);  // little-endian host
  EXPECT_EQ(checksum, static_cast<uint32_t>(Xxh3(h.data(), 12)));
  EXPECT_EQ(FormatBytes(17), "17 bytes");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(64 << 20), "64 MiB");
  EXPECT_EQ(FormatBytes(2ull << 30), "2.0 GiB");
  EXPECT_EQ(Quote(std::string("a\"\x01\n", 4)), R"("a\"\x01\n")");
  EXPECT_EQ(Quote("abcdef", 3), R"("abc"...)");
}

// ---- Authentication ----

// Runs AuthenticateAsServer on server_ in a thread while `client` runs here.
template <typename ClientFn>
StatusOr<std::string> WithServer(Socket& server, std::string_view secret, ClientFn client,
                                 Deadline deadline) {
  StatusOr<std::string> result = InternalError("server did not run");
  std::thread t([&] { result = AuthenticateAsServer(server, secret, deadline); });
  client();
  t.join();
  return result;
}

TEST_F(AuthTest, SameSecretSucceedsAndTheStreamStaysInSync) {
  Status client;
  auto server = WithServer(
      server_, "s3cret",
      [&] { client = AuthenticateAsClient(client_, "s3cret", "node 3", Soon()); }, Soon());
  ASSERT_TRUE(client.ok()) << client.ToString();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ(*server, "node 3");
  ASSERT_TRUE(SendFrame(client_, kFirstAgentFrameType, "after auth", Soon()).ok());
  auto frame = RecvFrame(server_, kLimit, Soon());
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_EQ(frame->payload, "after auth");
}

TEST_F(AuthTest, WrongSecretIsPermissionDeniedOnBothSides) {
  Status client;
  auto server = WithServer(
      server_, "secret-B",
      [&] { client = AuthenticateAsClient(client_, "secret-A", "node 1", Soon()); }, Soon());
  ASSERT_EQ(client.code(), StatusCode::kPermissionDenied) << client.ToString();
  EXPECT_NE(client.message().find("server " + client_.peer()), std::string::npos)
      << client.message();
  ASSERT_EQ(server.status().code(), StatusCode::kPermissionDenied) << server.status().ToString();
  EXPECT_NE(server.status().message().find("client " + server_.peer()), std::string::npos)
      << server.status().message();
  EXPECT_NE(server.status().message().find("authentication failed"), std::string::npos);
}

TEST_F(AuthTest, ClientThatDoesNotKnowTheSecretIsDenied) {
  // A hand-written client: a valid HELLO, then a made-up proof.
  std::string hello("\x01\x00\x00\x00", 4);
  hello += std::string(32, 'n') + "mallory";
  auto server = WithServer(
      server_, "s3cret",
      [&] {
        ASSERT_TRUE(SendFrame(client_, kFrameHello, hello, Soon()).ok());
        auto challenge = RecvFrame(client_, 1024, Soon());
        ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
        ASSERT_EQ(challenge->type, kFrameChallenge);
        ASSERT_TRUE(SendFrame(client_, kFrameProof, std::string(32, '\0'), Soon()).ok());
        auto reply = RecvFrame(client_, 1024, Soon());
        ASSERT_TRUE(reply.ok()) << reply.status().ToString();
        EXPECT_EQ(reply->type, kFrameError);
        EXPECT_EQ(reply->payload, "authentication failed");
      },
      Soon());
  ASSERT_EQ(server.status().code(), StatusCode::kPermissionDenied) << server.status().ToString();
  EXPECT_NE(server.status().message().find("client " + server_.peer() + " (\"mallory\")"),
            std::string::npos)
      << server.status().message();
}

TEST_F(AuthTest, ImpostorServerIsDetectedBeforeTheClientProvesAnything) {
  // A hand-written server that does not know the secret.
  StatusOr<Frame> hello = InternalError("unset"), after = InternalError("unset");
  std::thread impostor([&] {
    hello = RecvFrame(server_, 1024, Soon());
    SendFrame(server_, kFrameChallenge, Pattern(64, 9), Soon()).IgnoreError();
    after = RecvFrame(server_, 1024, Soon());
  });
  Status client = AuthenticateAsClient(client_, "the-job-secret", "node 2", Soon());
  impostor.join();
  ASSERT_EQ(client.code(), StatusCode::kPermissionDenied) << client.ToString();
  EXPECT_NE(client.message().find("server " + client_.peer() + " could not prove"),
            std::string::npos)
      << client.message();
  EXPECT_NE(client.message().find("impostor"), std::string::npos);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->payload.find("the-job-secret"), std::string::npos);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->type, kFrameError) << "the client sent a proof to an impostor";
}

TEST_F(AuthTest, SilentServerTimesOut) {
  auto start = Clock::now();
  Status s = AuthenticateAsClient(client_, "s3cret", "node 0", DeadlineAfter(200ms));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find(client_.peer()), std::string::npos) << s.message();
  EXPECT_LT(Seconds(start), 5);
}

TEST_F(AuthTest, MalformedHellosAreRejected) {
  std::string long_id("\x01\x00\x00\x00", 4);
  long_id += std::string(32, 'n') + std::string(300, 'x');
  SendFrame(client_, kFrameHello, long_id, Soon()).IgnoreError();
  auto server = AuthenticateAsServer(server_, "s3cret", Soon());
  ASSERT_EQ(server.status().code(), StatusCode::kInvalidArgument) << server.status().ToString();
  EXPECT_NE(server.status().message().find("malformed HELLO from client " + server_.peer()),
            std::string::npos)
      << server.status().message();
  auto reply = RecvFrame(client_, 1024, Soon());
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->type, kFrameError);
}

// An agent of another release is refused at the handshake: both sides get
// FAILED_PRECONDITION, and the message names both versions.
TEST_F(AuthTest, UnsupportedVersionIsFailedPrecondition) {
  std::string hello("\x02\x00\x00\x00", 4);
  hello += std::string(32, 'n') + "node 9";
  SendFrame(client_, kFrameHello, hello, Soon()).IgnoreError();
  auto server = AuthenticateAsServer(server_, "s3cret", Soon());
  ASSERT_EQ(server.status().code(), StatusCode::kFailedPrecondition) << server.status().ToString();
  EXPECT_NE(server.status().message().find("the caller speaks version 2, this agent version 1"),
            std::string::npos)
      << server.status().message();
  // The client side: the server's refusal is the answer to its HELLO.
  auto refusal = RecvFrame(client_, 1024, Soon());
  ASSERT_TRUE(refusal.ok()) << refusal.status().ToString();
  ClientHandshake client("s3cret", "node 9", "10.0.0.1:7000");
  ASSERT_TRUE(client.Hello().ok());
  std::string ignored;
  auto proof = client.OnChallenge(*refusal, &ignored);
  ASSERT_EQ(proof.status().code(), StatusCode::kFailedPrecondition) << proof.status().ToString();
  EXPECT_NE(proof.status().message().find("run the same Strata release on every node"),
            std::string::npos)
      << proof.status().message();
}

// The handshake without I/O, as an event loop drives it: every frame of an
// accepted handshake, then a client whose secret differs is refused. The
// frames are the frame fuzz target's seeds (test_util.h).
TEST(HandshakeTest, StepsAgreeAndAWrongSecretIsRefused) {
  auto framed = [](uint16_t type, const std::string& payload) {
    testing::SaveFuzzSeed("frame", EncodeFrame(type, payload));
    return Frame{type, 0, payload};
  };
  ClientHandshake client("s3cret", "node 4", "10.0.0.2:7000");
  ServerHandshake server("s3cret", "10.0.0.4:5000");
  std::string refusal;
  auto hello = client.Hello();
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  auto challenge = server.OnHello(framed(kFrameHello, *hello), &refusal);
  ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
  auto proof = client.OnChallenge(framed(kFrameChallenge, *challenge), &refusal);
  ASSERT_TRUE(proof.ok()) << proof.status().ToString();
  auto id = server.OnProof(framed(kFrameProof, *proof), &refusal);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "node 4");
  EXPECT_TRUE(client.OnOk(framed(kFrameAuthOk, "")).ok());

  ClientHandshake stranger("guess", "node 5", "10.0.0.2:7000");
  ServerHandshake guarded("s3cret", "10.0.0.5:5000");
  auto hello2 = stranger.Hello();
  ASSERT_TRUE(hello2.ok());
  auto challenge2 = guarded.OnHello(framed(kFrameHello, *hello2), &refusal);
  ASSERT_TRUE(challenge2.ok());
  // The server proves itself first: a client without the secret learns that
  // the proof does not match and sends nothing the server could check.
  EXPECT_FALSE(stranger.OnChallenge(framed(kFrameChallenge, *challenge2), &refusal).ok());
}

TEST_F(AuthTest, GarbageInsteadOfHelloIsRejected) {
  SendRaw("SSH-2.0-OpenSSH_9.2\r\n");
  auto server = AuthenticateAsServer(server_, "s3cret", Soon());
  ASSERT_EQ(server.status().code(), StatusCode::kInvalidArgument) << server.status().ToString();
  EXPECT_NE(server.status().message().find("garbage from " + server_.peer()), std::string::npos);
}

TEST_F(AuthTest, BadArgumentsAreRejectedBeforeSending) {
  EXPECT_EQ(AuthenticateAsClient(client_, "", "node 1", Soon()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AuthenticateAsClient(client_, "s", std::string(257, 'x'), Soon()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AuthenticateAsClient(client_, "s", "node\n1", Soon()).code(),
            StatusCode::kInvalidArgument);
  // Nothing reached the server.
  char byte;
  EXPECT_EQ(server_.RecvAll(&byte, 1, DeadlineAfter(50ms)).code(), StatusCode::kDeadlineExceeded);
}

TEST(HandshakeBudgetTest, OneSourceHoldsAtMostItsShareAndAllAtMostTheTotal) {
  net::HandshakeBudget b(/*total=*/5, /*per_source=*/2);
  EXPECT_TRUE(b.TryAcquire("10.0.0.1"));
  EXPECT_TRUE(b.TryAcquire("10.0.0.1"));
  EXPECT_FALSE(b.TryAcquire("10.0.0.1"));  // its share is spent
  EXPECT_TRUE(b.TryAcquire("10.0.0.2"));
  EXPECT_TRUE(b.TryAcquire("10.0.0.2"));
  EXPECT_TRUE(b.TryAcquire("10.0.0.3"));
  EXPECT_FALSE(b.TryAcquire("10.0.0.4"));  // the total is spent
  b.Release("10.0.0.1");
  EXPECT_TRUE(b.TryAcquire("10.0.0.4"));
  EXPECT_FALSE(b.TryAcquire("10.0.0.1"));
  b.Release("10.0.0.9");  // never granted: ignored
  EXPECT_FALSE(b.TryAcquire("10.0.0.5"));
}

TEST(HandshakeBudgetTest, RefusalsAreLoggedFirstThenAtMostOncePerPeriod) {
  net::HandshakeBudget b(1, 1);
  uint64_t count = 0;
  EXPECT_FALSE(b.RefusalsToLog(std::chrono::hours(1), &count));  // none yet
  ASSERT_TRUE(b.TryAcquire("a"));
  EXPECT_FALSE(b.TryAcquire("b"));
  EXPECT_TRUE(b.RefusalsToLog(std::chrono::hours(1), &count));
  EXPECT_EQ(count, 1u);
  EXPECT_FALSE(b.TryAcquire("b"));
  EXPECT_FALSE(b.TryAcquire("c"));
  EXPECT_FALSE(b.RefusalsToLog(std::chrono::hours(1), &count));  // within the period
  EXPECT_TRUE(b.RefusalsToLog(std::chrono::seconds(0), &count));
  EXPECT_EQ(count, 2u);
}

TEST(HandshakeBudgetTest, SourceAddressDropsThePort) {
  EXPECT_EQ(net::SourceAddress("10.1.2.3:7701"), "10.1.2.3");
  EXPECT_EQ(net::SourceAddress("[fe80::1]:7701"), "fe80::1");
  EXPECT_EQ(net::SourceAddress("node7"), "node7");
  EXPECT_EQ(net::SourceAddress("fe80::1"), "fe80::1");
}

// IPv6 sources count by their /64; IPv4 ones (mapped or not) by address.
TEST(HandshakeBudgetTest, AnIpv6SourceCountsByItsSlash64) {
  EXPECT_EQ(net::BudgetSource("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:7701"), "2001:db8:1:2::/64");
  EXPECT_EQ(net::BudgetSource("[2001:db8:1:2::1]:40000"), "2001:db8:1:2::/64");
  EXPECT_EQ(net::BudgetSource("[2001:db8:1:3::1]:40000"), "2001:db8:1:3::/64");
  EXPECT_EQ(net::BudgetSource("[::ffff:10.1.2.3]:7701"), "10.1.2.3");
  EXPECT_EQ(net::BudgetSource("10.1.2.3:7701"), "10.1.2.3");
  EXPECT_EQ(net::BudgetSource("[::1]:7701"), "::/64");
}

// 2,000 addresses of one /64 (one host can use millions) hold the share of
// one source; the job's own peers still find slots.
TEST(HandshakeBudgetTest, TwoThousandSourcesOfOneSlash64LeaveSlotsForThePeers) {
  net::HandshakeBudget budget(1024, 8);
  int granted = 0;
  for (int i = 0; i < 2000; ++i) {
    char peer[64];
    std::snprintf(peer, sizeof peer, "[2001:db8:0:7:%x:%x::1]:%d", i / 256, i % 256, 40000 + i);
    granted += budget.TryAcquire(net::BudgetSource(peer)) ? 1 : 0;
  }
  EXPECT_EQ(granted, 8);
  for (int node = 0; node < 500; ++node) {
    const std::string peer =
        "10.0." + std::to_string(node / 250) + "." + std::to_string(node % 250 + 1) + ":7701";
    EXPECT_TRUE(budget.TryAcquire(net::BudgetSource(peer))) << peer;
  }
}

}  // namespace
}  // namespace strata::net
