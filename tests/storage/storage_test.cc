// Copyright 2026 The Strata Authors.
//
// The storage backends (file://, s3://) against a scratch directory and a
// real S3 (moto_server, signatures and policies checked), with faults
// injected by a proxy and by killing the server.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "fault_proxy.h"
#include "moto.h"
#include "storage/crc32c.h"
#include "storage/object_store.h"
#include "storage/rate_limiter.h"
#include "storage/retry.h"
#include "storage/s3_client.h"
#include "storage/s3_errors.h"
#include "storage/s3_store.h"
#include "storage/sigv4.h"
#include "strata/env.h"
#include "test_util.h"

namespace strata::storage {
namespace {

using testing::MotoServer;
using testing::ScratchDir;
using Clock = std::chrono::steady_clock;

constexpr char kBucket[] = "strata-test";
constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (size_t i = n - n % 8; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One moto per test process, started on first use (ctest runs each test in a
// process of its own; a direct run of the binary shares it among all tests).
MotoServer* SharedMoto() {
  static std::unique_ptr<MotoServer> moto = [] {
    auto m = std::make_unique<MotoServer>();
    Status s = m->Start();
    if (s.ok()) s = m->CreateBucket(kBucket);
    if (!s.ok()) {
      ADD_FAILURE() << "moto_server: " << s.ToString();
      m.reset();
    }
    return m;
  }();
  return moto.get();
}

StoreOptions OptionsFor(const MotoServer& moto, const testing::S3Credentials& creds) {
  StoreOptions o;
  o.endpoint = moto.endpoint();
  o.region = moto.region();
  o.access_key_id = creds.access_key_id;
  o.secret_access_key = creds.secret_access_key;
  o.initial_backoff = std::chrono::milliseconds(20);
  o.max_backoff = std::chrono::milliseconds(500);
  return o;
}

std::unique_ptr<ObjectStore> MustOpen(const std::string& url, const StoreOptions& o) {
  auto store = OpenObjectStore(url, o);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// A unique prefix per test, so tests sharing a bucket never see each other.
std::string TestPrefix() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "-" + info->name();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  }
  return name + "-" + std::to_string(::getpid());
}

// A bucket of its own for the running test, created on `moto`.
std::string TestBucket(MotoServer* moto) {
  std::string name = "t" + std::to_string(::getpid()) + "-" + TestPrefix();
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  name = name.substr(0, 63);
  while (name.back() == '-') name.pop_back();
  Status s = moto->CreateBucket(name);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return name;
}

// ---------------------------------------------------------------------------
// Both backends.

class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "s3") {
      moto_ = SharedMoto();
      ASSERT_NE(moto_, nullptr);
    }
  }
  std::unique_ptr<ObjectStore> Open(StoreOptions o = {}) {
    if (GetParam() == "file") return MustOpen("file://" + dir_.Sub("store"), o);
    StoreOptions s3 = OptionsFor(*moto_, moto_->strata());
    s3.part_bytes = o.part_bytes;
    s3.parallelism = o.parallelism;
    s3.list_page_size = o.list_page_size;
    if (bucket_.empty()) bucket_ = TestBucket(moto_);
    return MustOpen("s3://" + bucket_, s3);
  }

  ScratchDir dir_{"storage"};
  MotoServer* moto_ = nullptr;
  std::string bucket_;
};

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest, ::testing::Values("file", "s3"),
                         [](const auto& param_info) { return param_info.param; });

TEST_P(BackendTest, SmallObjectsRoundTrip) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("a/b/one", "first").ok());
  ASSERT_TRUE(store->Put("a/b/one", "second").ok());  // replaces
  ASSERT_TRUE(store->Put("a/two", "").ok());          // empty object
  EXPECT_EQ(store->Get("a/b/one").value_or("?"), "second");
  EXPECT_EQ(store->Get("a/two").value_or("?"), "");
  StatusOr<std::string> missing = store->Get("a/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();

  auto list = store->List("");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "a/b/one");
  EXPECT_EQ((*list)[0].size, 6u);
  EXPECT_EQ((*list)[1].key, "a/two");

  std::string out = dir_.Sub("empty.out");
  EXPECT_EQ(store->GetFile("a/two", out).value_or(99), 0u);
  EXPECT_TRUE(store->Delete("a/b/one").ok());
  EXPECT_TRUE(store->Delete("a/b/one").ok());  // already gone: OK
  EXPECT_EQ(store->List("").value_or({}).size(), 1u);
  Status check = store->CheckAccess();
  EXPECT_TRUE(check.ok()) << check.ToString();
  EXPECT_EQ(store->List("").value_or({}).size(), 1u);  // the probe is gone
}

TEST_P(BackendTest, LargeFileRoundTripInParts) {
  StoreOptions o;
  o.part_bytes = 8 * kMiB;
  o.parallelism = 4;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  std::string data = RandomBytes(100 * kMiB + 12345, 1);
  std::string in = dir_.Sub("big.in"), out = dir_.Sub("big.out");
  testing::WriteFile(in, data);
  auto t = Clock::now();
  ASSERT_TRUE(store->PutFile("x/big", in).ok());
  double up = SecondsSince(t);
  t = Clock::now();
  StatusOr<uint64_t> n = store->GetFile("x/big", out);
  double down = SecondsSince(t);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(testing::ReadFile(out) == data) << "downloaded bytes differ";
  auto list = store->List("");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].size, data.size());
  std::printf("%s: 100 MiB up %.2f s, down %.2f s\n", GetParam().c_str(), up, down);
}

TEST_P(BackendTest, ListPagesAndPrefixes) {
  StoreOptions o;
  o.list_page_size = 7;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  std::vector<std::string> keys;
  for (int i = 0; i < 25; ++i) {
    keys.push_back((i % 2 ? "y/" : "x/") + std::to_string(1000 + i));
    ASSERT_TRUE(store->Put(keys.back(), std::string(static_cast<size_t>(i), 'x')).ok());
  }
  std::sort(keys.begin(), keys.end());
  auto all = store->List("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<std::string> got;
  for (const auto& info : *all) got.push_back(info.key);
  EXPECT_EQ(got, keys);
  EXPECT_EQ(store->List("x").value_or({}).size(), 13u);
  EXPECT_EQ(store->List("x/").value_or({}).size(), 13u);
  EXPECT_EQ(store->List("x/101").value_or({}).size(), 5u);  // x/1010, 1012, ... 1018
  EXPECT_EQ(store->List("nothing/").value_or({{"?", 0}}).size(), 0u);
}

TEST_P(BackendTest, OddCharactersInKeys) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  // With every signature checked: moto checks some of these over another
  // canonical form than AWS, and the client adapts (sigv4.h).
  std::vector<std::string> keys = {"with space/a b", "eq=and+plus",     "ünï/çødé",
                                   "p%20q",          "sym!$&'()*,;:@~", "q?x#y"};
  for (const auto& k : keys) ASSERT_TRUE(store->Put(k, "v:" + k).ok()) << k;
  for (const auto& k : keys) EXPECT_EQ(store->Get(k).value_or("?"), "v:" + k) << k;
  auto list = store->List("");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  std::sort(keys.begin(), keys.end());
  ASSERT_EQ(list->size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ((*list)[i].key, keys[i]);
  for (const auto& k : keys) {
    auto below = store->List(k);
    ASSERT_TRUE(below.ok()) << k << ": " << below.status().ToString();
    ASSERT_FALSE(below->empty()) << k;
    EXPECT_EQ(below->front().key, k);
    EXPECT_TRUE(store->Delete(k).ok()) << k;
  }
  EXPECT_TRUE(store->List("").value_or({{"?", 0}}).empty());
}

TEST_P(BackendTest, RejectsUnsafeKeys) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  for (const char* k : {"../x", "a/../../x", "/abs", "a//b", "a/", "", ".", "a/./b",
                        ".strata-tmp-1", "a/.strata-tmp-x/b", "tab\there"}) {
    Status s = store->Put(k, "x");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "key \"" << k << "\": " << s.ToString();
    EXPECT_EQ(store->Get(k).status().code(), StatusCode::kInvalidArgument) << k;
  }
  EXPECT_EQ(store->List("").value_or({{"?", 0}}).size(), 0u);
}

// ---------------------------------------------------------------------------
// file:// only.

TEST(FileStoreTest, SymlinksInsideTheRootAreNotFollowed) {
  ScratchDir dir("file");
  std::string outside = dir.Sub("outside");
  ASSERT_EQ(::mkdir(outside.c_str(), 0755), 0);
  testing::WriteFile(outside + "/secret", "secret");
  auto store = MustOpen("file://" + dir.Sub("root"), {});
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(::symlink(outside.c_str(), dir.Sub("root/evil").c_str()), 0);
  ASSERT_EQ(::symlink((outside + "/secret").c_str(), dir.Sub("root/link").c_str()), 0);

  Status get = store->Get("evil/secret").status();
  EXPECT_EQ(get.code(), StatusCode::kPermissionDenied) << get.ToString();
  EXPECT_EQ(store->Get("link").status().code(), StatusCode::kPermissionDenied);
  Status put = store->Put("evil/planted", "x");
  EXPECT_EQ(put.code(), StatusCode::kPermissionDenied) << put.ToString();
  EXPECT_FALSE(Env::Default()->Exists(outside + "/planted"));
  EXPECT_EQ(store->List("").value_or({{"?", 0}}).size(), 0u);  // links are no objects
  EXPECT_EQ(store->Delete("evil/secret").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(testing::ReadFile(outside + "/secret"), "secret");
  std::printf("%s\n", get.ToString().c_str());
}

TEST(FileStoreTest, TempFilesAreInvisibleAndEmptyDirsAreRemoved) {
  ScratchDir dir("file");
  auto store = MustOpen("file://" + dir.Sub("root"), {});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("a/b/c/obj", "x").ok());
  testing::WriteFile(dir.Sub("root/a/.strata-tmp-1-2"), "partial");
  auto list = store->List("");
  ASSERT_EQ(list.value_or({}).size(), 1u);
  ASSERT_TRUE(store->Delete("a/b/c/obj").ok());
  EXPECT_FALSE(Env::Default()->Exists(dir.Sub("root/a/b")));
  EXPECT_TRUE(Env::Default()->Exists(dir.Sub("root/a")));  // still holds the temp file
  EXPECT_TRUE(Env::Default()->Exists(dir.Sub("root")));
}

// The upload bandwidth limit holds for file:// too (a lower bound only:
// a slow machine can only make the copy slower).
TEST(FileStoreTest, UploadsKeepToTheBandwidthLimit) {
  ScratchDir dir("file");
  testing::WriteFile(dir.Sub("src"), std::string(4 << 20, 'x'));
  StoreOptions o;
  o.upload_bytes_per_second = 8 << 20;
  auto store = MustOpen("file://" + dir.Sub("root"), o);
  ASSERT_NE(store, nullptr);
  auto t = Clock::now();
  ASSERT_TRUE(store->PutFile("obj", dir.Sub("src")).ok());
  EXPECT_GT(SecondsSince(t), 0.35) << "4 MiB at 8 MiB/s";
  EXPECT_EQ(store->Get("obj").value_or(""), std::string(4 << 20, 'x'));
}

TEST(FileStoreTest, UrlsAreChecked) {
  EXPECT_EQ(OpenObjectStore("file://relative/dir").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenObjectStore("gs://bucket").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenObjectStore("s3://Bad_Bucket/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenObjectStore("s3://bucket/../x").status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Pieces of the S3 backend.

TEST(S3PiecesTest, UriEncodeIsSigV4s) {
  // What botocore sends for the key "t2/a=b+c!é".
  EXPECT_EQ(UriEncode("t2/a=b+c!\xc3\xa9", true), "t2/a%3Db%2Bc%21%C3%A9");
  EXPECT_EQ(UriEncode("a b/~x", false), "a%20b%2F~x");
}

TEST(S3PiecesTest, Crc32cKnownValues) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32cBase64(0xe3069283u), "4waSgw==");
  std::string data = RandomBytes(1000003, 7);
  uint32_t whole = Crc32c(0, data.data(), data.size());
  uint32_t split = Crc32c(Crc32c(0, data.data(), 333), data.data() + 333, data.size() - 333);
  EXPECT_EQ(whole, split);
}

TEST(S3PiecesTest, BackoffIsFullJitterWithinTheCap) {
  using std::chrono::milliseconds;
  for (int retry = 1; retry < 12; ++retry) {
    for (int i = 0; i < 50; ++i) {
      auto d = BackoffDelay(retry, milliseconds(100), milliseconds(2000));
      EXPECT_GE(d.count(), 0);
      EXPECT_LE(d.count(), std::min<int64_t>(2000, 100LL << (retry - 1)));
    }
  }
}

TEST(S3PiecesTest, RateLimiterHoldsTheRate) {
  RateLimiter limiter(8 * kMiB);  // burst 0.8 MiB
  auto t = Clock::now();
  for (int i = 0; i < 32; ++i) limiter.Acquire(128 << 10);  // 4 MiB
  double s = SecondsSince(t);
  EXPECT_GT(s, 0.35);
  EXPECT_LT(s, 1.0);
}

TEST(S3PiecesTest, ClockSkewNamesBothTimes) {
  S3ErrorBody e = ParseS3Error(
      "<?xml version=\"1.0\"?><Error><Code>RequestTimeTooSkewed</Code><Message>The difference "
      "between the request time and the current time is too large.</Message><RequestTime>"
      "20261121T080000Z</RequestTime><ServerTime>2026-11-21T08:20:30Z</ServerTime>"
      "<MaxAllowedSkewMilliseconds>900000</MaxAllowedSkewMilliseconds></Error>");
  Status s = S3ErrorStatus({"s3://b/p", "b", "PutObject", "k", ""}, 403, e);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "s3://b/p: PutObject k: clock skew: the server's time differs from ours by 20 min "
            "30 s (server 2026-11-21T08:20:30Z, ours 20261121T080000Z); fix this machine's clock "
            "(NTP) (RequestTimeTooSkewed)");
  EXPECT_EQ(ParseS3Error("not xml <").code, "");
}

// ---------------------------------------------------------------------------
// s3:// against moto: errors, faults, the aws CLI.

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    moto_ = SharedMoto();
    ASSERT_NE(moto_, nullptr);
  }
  StoreOptions Options() const { return OptionsFor(*moto_, moto_->strata()); }
  std::string Url() const { return std::string("s3://") + kBucket + "/" + TestPrefix(); }

  MotoServer* moto_ = nullptr;
  ScratchDir dir_{"s3"};
};

TEST_F(S3Test, MissingBucketIsOneReadableLine) {
  auto store = MustOpen("s3://no-such-bucket/job", Options());
  Status s = store->Put("k/1", "x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "s3://no-such-bucket/job: PutObject k/1: bucket \"no-such-bucket\" does not exist "
            "(NoSuchBucket)");
  Status check = MustOpen("s3://no-such-bucket", Options())->CheckAccess();
  EXPECT_EQ(check.code(), StatusCode::kNotFound) << check.ToString();
  std::printf("%s\n%s\n", s.ToString().c_str(), check.ToString().c_str());
}

TEST_F(S3Test, UserWithoutPolicyIsRefusedNamingThePermission) {
  auto store = MustOpen(Url(), OptionsFor(*moto_, moto_->nobody()));
  Status s = store->Put("k", "x");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), Url() +
                             ": PutObject k refused: AccessDenied (the credentials lack "
                             "s3:PutObject on bucket \"" +
                             kBucket + "\")");
  Status d = store->Delete("k");
  EXPECT_EQ(d.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(d.message().find("s3:DeleteObject"), std::string::npos) << d.ToString();
  EXPECT_EQ(store->CheckAccess().code(), StatusCode::kPermissionDenied);
  std::printf("%s\n", s.ToString().c_str());
}

TEST_F(S3Test, WrongSecretIsCredentialsRefused) {
  StoreOptions o = Options();
  o.secret_access_key = "not-the-secret";
  auto store = MustOpen(Url(), o);
  Status s = store->Put("k", "x");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), Url() +
                             ": PutObject k: credentials refused: SignatureDoesNotMatch "
                             "(check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)");
  o.access_key_id = "AKIANOSUCHKEY0000000";
  Status s2 = MustOpen(Url(), o)->Get("k").status();
  EXPECT_EQ(s2.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s2.message().find("credentials refused: InvalidAccessKeyId"), std::string::npos)
      << s2.ToString();
  std::printf("%s\n", s.ToString().c_str());
}

TEST_F(S3Test, UnreachableEndpointIsUnavailableFast) {
  StoreOptions o = Options();
  testing::FaultProxy closed(moto_->port());
  ASSERT_TRUE(closed.Start().ok());
  o.endpoint = closed.endpoint();
  closed.Stop();  // nothing listens on its port now
  o.max_attempts = 3;
  auto store = MustOpen(Url(), o);
  auto t = Clock::now();
  Status s = store->Put("k", "x");
  EXPECT_LT(SecondsSince(t), 3.0);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(": PutObject k: cannot reach " + o.endpoint + " ("), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("after 3 attempts"), std::string::npos) << s.ToString();
  EXPECT_EQ(dynamic_cast<S3Store*>(store.get())->retries(), 2u);

  o.endpoint = "http://no-such-host.invalid:9000";
  o.max_attempts = 2;
  Status dns = MustOpen(Url(), o)->Get("k").status();
  EXPECT_EQ(dns.code(), StatusCode::kUnavailable);
  EXPECT_NE(dns.message().find("cannot reach http://no-such-host.invalid:9000"), std::string::npos)
      << dns.ToString();
  std::printf("%s\n%s\n", s.ToString().c_str(), dns.ToString().c_str());
}

TEST_F(S3Test, SlowDownIsRetried) {
  testing::FaultProxy proxy(moto_->port());
  ASSERT_TRUE(proxy.Start().ok());
  StoreOptions o = Options();
  o.endpoint = proxy.endpoint();
  auto store = MustOpen(Url(), o);
  auto* s3 = dynamic_cast<S3Store*>(store.get());
  proxy.FailNext(3);
  ASSERT_TRUE(store->Put("k", RandomBytes(300000, 3)).ok());
  EXPECT_EQ(proxy.failed(), 3u);
  EXPECT_EQ(s3->retries(), 3u);
  proxy.FailNext(2);
  EXPECT_EQ(store->Get("k").value_or("").size(), 300000u);
  EXPECT_EQ(s3->retries(), 5u);

  // More failures than attempts: UNAVAILABLE naming the last error.
  o.max_attempts = 2;
  auto few = MustOpen(Url(), o);
  proxy.FailNext(2);
  Status s = few->Put("k", "x");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), Url() +
                             ": PutObject k: server error: SlowDown (Please reduce your "
                             "request rate.) after 2 attempts");
  std::printf("%s\n", s.ToString().c_str());
}

TEST_F(S3Test, StalledResponseIsRetried) {
  testing::FaultProxy proxy(moto_->port());
  ASSERT_TRUE(proxy.Start().ok());
  StoreOptions o = Options();
  o.endpoint = proxy.endpoint();
  o.stall_timeout = std::chrono::milliseconds(1000);
  auto store = MustOpen(Url(), o);
  ASSERT_TRUE(store->Put("k", "value").ok());
  proxy.DelayNext(1, std::chrono::milliseconds(5000));
  auto t = Clock::now();
  EXPECT_EQ(store->Get("k").value_or("?"), "value");
  double s = SecondsSince(t);
  EXPECT_EQ(proxy.delayed(), 1u);
  EXPECT_EQ(dynamic_cast<S3Store*>(store.get())->retries(), 1u);
  EXPECT_LT(s, 4.0);  // gave up on the stalled attempt after ~1-2 s
}

TEST_F(S3Test, ResetMidBodyIsRetried) {
  testing::FaultProxy proxy(moto_->port());
  ASSERT_TRUE(proxy.Start().ok());
  StoreOptions o = Options();
  o.endpoint = proxy.endpoint();
  auto store = MustOpen(Url(), o);
  std::string data = RandomBytes(4 * kMiB, 4);
  proxy.ResetNext(1, kMiB);
  ASSERT_TRUE(store->Put("k", data).ok());
  EXPECT_EQ(proxy.resets(), 1u);
  EXPECT_TRUE(store->Get("k").value_or("") == data);
}

TEST_F(S3Test, ProxyRestartMidUploadSucceeds) {
  testing::FaultProxy proxy(moto_->port());
  ASSERT_TRUE(proxy.Start().ok());
  StoreOptions o = Options();
  o.endpoint = proxy.endpoint();
  o.part_bytes = 8 * kMiB;
  o.parallelism = 2;
  o.initial_backoff = std::chrono::milliseconds(100);
  o.max_backoff = std::chrono::milliseconds(1000);
  // Backoff is fully jittered: ten attempts can all fall inside the 1.5 s
  // outage (it happened under ASan). Twenty leave ~8 s of expected waiting.
  o.max_attempts = 20;
  auto store = MustOpen(Url(), o);
  std::string data = RandomBytes(48 * kMiB, 5);
  std::string in = dir_.Sub("in");
  testing::WriteFile(in, data);
  Status put;
  std::thread uploader([&] { put = store->PutFile("big", in); });
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (proxy.bytes_up() < 12 * kMiB && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  proxy.Stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  Status restarted = proxy.Start();
  uploader.join();
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  ASSERT_TRUE(put.ok()) << put.ToString();
  EXPECT_GT(dynamic_cast<S3Store*>(store.get())->retries(), 0u);
  std::string out = dir_.Sub("out");
  ASSERT_EQ(store->GetFile("big", out).value_or(0), data.size());
  EXPECT_TRUE(testing::ReadFile(out) == data);
}

TEST_F(S3Test, ServerKilledAndRestartedMidUploadIsNotFound) {
  MotoServer moto;  // its own: this test destroys its state
  ASSERT_TRUE(moto.Start().ok());
  ASSERT_TRUE(moto.CreateBucket("doomed").ok());
  StoreOptions o = OptionsFor(moto, moto.strata());
  o.part_bytes = 8 * kMiB;
  o.parallelism = 2;
  // Retries outlast moto's restart (a Python server's start: seconds on a
  // loaded machine, where 10 attempts within ~6 s ran out first).
  o.initial_backoff = std::chrono::milliseconds(200);
  o.max_backoff = std::chrono::milliseconds(3000);
  o.max_attempts = 30;
  // Through a proxy that counts the bytes: the kill comes once the upload
  // is under way (a fixed wait let a fast machine finish it before).
  testing::FaultProxy proxy(moto.port());
  ASSERT_TRUE(proxy.Start().ok());
  o.endpoint = proxy.endpoint();
  auto store = MustOpen("s3://doomed/job", o);
  std::string in = dir_.Sub("in");
  testing::WriteFile(in, RandomBytes(64 * kMiB, 6));
  ASSERT_TRUE(store->Put("marker", "x").ok());
  Status put;
  std::thread uploader([&] { put = store->PutFile("big", in); });
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (proxy.bytes_up() < 8 * kMiB && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  moto.Kill();
  Status restarted = moto.Restart();
  uploader.join();
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  EXPECT_EQ(put.code(), StatusCode::kNotFound) << put.ToString();
  EXPECT_NE(put.message().find("bucket \"doomed\" does not exist (NoSuchBucket)"),
            std::string::npos)
      << put.ToString();
  std::printf("%s\n", put.ToString().c_str());
}

// Prefixes and keys whose SigV4 canonical form needs escapes, as users name
// jobs and as the issue that found moto refusing them listed them.
const std::vector<std::string>& OddPrefixes() {
  static const std::vector<std::string> p = {"job", "a/b/c", "job_1-x.y",
                                             "sp ace/eq=a+b~/\xc3\xbcml/colon:at@"};
  return p;
}
const std::vector<std::string>& OddKeys() {
  static const std::vector<std::string> k = {"k/plain", "k/a b", "k/eq=and+plus",
                                             "k/\xc3\xa9t\xc3\xa9~", "k/sym!$&'()*,;:@"};
  return k;
}

// Every request the store sends, with moto checking every signature, below
// prefixes and with keys that need encoding: PutObject, GetObject (whole and
// ranged), HeadObject, the multipart upload (uploads, partNumber, uploadId),
// ListObjectsV2 with a prefix and continuation tokens, DeleteObject.
TEST_F(S3Test, EveryStoreRequestIsSignedForPrefixesAndKeysNeedingEncoding) {
  const std::string bucket = TestBucket(moto_);
  const std::string big = RandomBytes(11 * kMiB, 12);
  const std::string in = dir_.Sub("in");
  testing::WriteFile(in, big);
  for (const std::string& prefix : OddPrefixes()) {
    SCOPED_TRACE(prefix);
    StoreOptions o = Options();
    o.part_bytes = 5 * kMiB;  // 3 parts up, 3 ranges down
    o.list_page_size = 2;     // every listing pages with continuation tokens
    auto store = MustOpen("s3://" + bucket + "/" + prefix, o);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CheckAccess().ok());
    for (const auto& k : OddKeys()) {
      ASSERT_TRUE(store->Put(k, "v:" + k).ok()) << k;
      EXPECT_EQ(store->Get(k).value_or("?"), "v:" + k) << k;
    }
    Status up = store->PutFile("k/big file=1+1", in);
    ASSERT_TRUE(up.ok()) << up.ToString();
    const std::string out = dir_.Sub("out");
    auto got = store->GetFile("k/big file=1+1", out);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(testing::ReadFile(out) == big);
    auto list = store->List("k/");
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    EXPECT_EQ(list->size(), OddKeys().size() + 1);
    for (const auto& k : OddKeys()) ASSERT_TRUE(store->Delete(k).ok()) << k;
    ASSERT_TRUE(store->Delete("k/big file=1+1").ok());
    EXPECT_TRUE(store->List("").value_or({{"?", 0}}).empty());
  }
}

// The query parameters the store does not send today, through the same
// client: start-after, versionId (whole and ranged), AbortMultipartUpload,
// ListMultipartUploads with a prefix; and a refused signature is an error
// after one request, never signed another way and sent again.
TEST_F(S3Test, OtherQueryParametersAreSignedToo) {
  const std::string bucket = TestBucket(moto_);
  S3Config c;
  c.url = "s3://" + bucket;
  c.bucket = bucket;
  c.endpoint = moto_->endpoint();
  c.region = moto_->region();
  c.access_key_id = moto_->strata().access_key_id;
  c.secret_access_key = moto_->strata().secret_access_key;
  c.options = Options();
  S3Client client(c);
  using Query = std::vector<std::pair<std::string, std::string>>;
  auto req = [&](std::string method, std::string key, Query query, const S3Body* body = nullptr) {
    S3Request r;
    r.method = std::move(method);
    r.object_key = std::move(key);
    r.query = std::move(query);
    r.body = body;
    return r;
  };
  auto call = [&](S3Request r) {
    r.op = S3Op{c.url, bucket, "Test", r.object_key, ""};
    auto resp = client.Call(r);
    EXPECT_TRUE(resp.ok()) << r.method << " " << r.object_key << ": " << resp.status().ToString();
    return resp.ok() ? std::move(*resp) : S3Response{};
  };
  static constexpr char kVersioning[] =
      "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Status>Enabled</Status></VersioningConfiguration>";
  S3Body versioning{kVersioning, -1, 0, sizeof(kVersioning) - 1};
  call(req("PUT", "", {{"versioning", ""}}, &versioning));

  const std::string key = OddPrefixes().back() + "/" + OddKeys()[2];
  std::vector<std::string> versions;
  for (const std::string v : {"first version", "second version"}) {
    S3Body b{v, -1, 0, v.size()};
    versions.push_back(call(req("PUT", key, {}, &b)).headers["x-amz-version-id"]);
    ASSERT_FALSE(versions.back().empty());
  }
  EXPECT_EQ(call(req("GET", key, {{"versionId", versions[0]}})).body, "first version");
  S3Request ranged = req("GET", key, {{"versionId", versions[0]}});
  ranged.range = {6, 12};
  EXPECT_EQ(call(ranged).body, "version");
  EXPECT_EQ(call(req("HEAD", key, {{"versionId", versions[1]}})).headers["content-length"], "14");

  for (const auto& k : OddKeys()) {
    S3Body b{k, -1, 0, k.size()};
    call(req("PUT", OddPrefixes().back() + "/" + k, {}, &b));
  }
  auto after =
      call(req("GET", "",
               {{"list-type", "2"}, {"prefix", OddPrefixes().back() + "/"}, {"start-after", key}}));
  for (const auto& k : OddKeys()) {
    const std::string full = OddPrefixes().back() + "/" + k;
    std::string xml;  // the key as the listing's XML writes it
    for (char ch : full) xml += ch == '&' ? std::string("&amp;") : std::string(1, ch);
    EXPECT_EQ(after.body.find("<Key>" + xml + "</Key>") != std::string::npos, full > key)
        << full << "\n"
        << after.body;
  }

  auto created = call(req("POST", key, {{"uploads", ""}}));
  const std::string open_tag = "<UploadId>", close_tag = "</UploadId>";
  size_t b = created.body.find(open_tag), e = created.body.find(close_tag);
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos) << created.body;
  const std::string upload_id = created.body.substr(b + open_tag.size(), e - b - open_tag.size());
  auto uploads = call(req("GET", "", {{"uploads", ""}, {"prefix", OddPrefixes().back() + "/"}}));
  EXPECT_NE(uploads.body.find(upload_id), std::string::npos) << uploads.body;
  call(req("DELETE", key, {{"uploadId", upload_id}}));

  S3Config wrong = c;
  wrong.secret_access_key += "x";
  S3Client refused(wrong);
  S3Request list = req("GET", "", {{"list-type", "2"}, {"prefix", "a/b"}});
  list.op = S3Op{c.url, bucket, "ListObjectsV2", "", ""};
  auto r = refused.Call(list);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
  EXPECT_EQ(refused.requests(), 1u);
  S3Request head = req("HEAD", key, {});  // a 403 with no body to say why
  head.op = S3Op{c.url, bucket, "HeadObject", key, ""};
  EXPECT_FALSE(refused.Call(head).ok());
  EXPECT_EQ(refused.requests(), 2u);
}

TEST_F(S3Test, AwsCliSeesExactlyWhatWeWrote) {
  std::string url = "s3://" + TestBucket(moto_);
  auto store = MustOpen(url, Options());
  std::map<std::string, uint64_t> wrote = {{"a/1", 1}, {"a/b/2", 2000}, {"c d/3", 0}};
  for (const auto& [k, n] : wrote) {
    ASSERT_TRUE(store->Put(k, std::string(n, 'z')).ok());
  }
  std::string in = dir_.Sub("multi");
  testing::WriteFile(in, RandomBytes(11 * kMiB, 9));
  StoreOptions small = Options();
  small.part_bytes = 5 * kMiB;
  ASSERT_TRUE(MustOpen(url, small)->PutFile("multi", in).ok());
  wrote["multi"] = 11 * kMiB;

  std::string out;
  std::string bin = MotoServer::FindTool("aws");
  ASSERT_FALSE(bin.empty())
      << "aws CLI not found in the project environment or on PATH (scripts/install-deps.sh)";
  int rc = testing::Run({bin, "s3", "ls", "--recursive", url + "/"}, &out, moto_->AwsEnv());
  ASSERT_EQ(rc, 0) << out;
  std::map<std::string, uint64_t> listed;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    // "2026-11-21 07:44:20       2000 <prefix>/a/b/2"
    std::istringstream f(line);
    std::string date, time;
    uint64_t size = 0;
    f >> date >> time >> size;
    std::string key;
    std::getline(f >> std::ws, key);
    listed[key] = size;
  }
  EXPECT_EQ(listed, wrote) << out;
}

TEST_F(S3Test, ChecksumIsSentAndStored) {
  auto store = MustOpen(Url(), Options());
  ASSERT_TRUE(store->Put("check", "123456789").ok());
  std::string out;
  const auto& c = moto_->strata();
  int rc =
      testing::Run({MotoServer::FindTool("curl"), "-s", "-I", "--aws-sigv4", "aws:amz:us-east-1:s3",
                    "-u", c.access_key_id + ":" + c.secret_access_key, "-H",
                    "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-H", "x-amz-checksum-mode: ENABLED",
                    moto_->endpoint() + "/" + kBucket + "/" + TestPrefix() + "/check"},
                   &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("x-amz-checksum-crc32c: 4waSgw=="), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::storage
