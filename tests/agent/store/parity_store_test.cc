// Copyright 2026 The Strata Authors.
//
// ParityStore, the parity shards of the coded peer tier: a whole rs(6,2)
// group's contributions accumulated shard by shard in any order equal the
// codec's own encoding, and decode a lost member; a contribution is taken
// once, only when its bytes match their checksum; a shard survives a
// reopen, and a power cut at any call of a contribution leaves the old
// shard or the new one.
#include "agent/store/parity_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "ec/codec.h"
#include "fault_env.h"
#include "test_util.h"
#include "util/clock.h"
#include "util/file_util.h"
#include "util/hash.h"

namespace strata::agent {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes Random(size_t n, uint32_t seed) { return strata::testing::RandomData(n, seed); }

// A reader over `bytes`, counting what it gave.
ParityStore::Reader ReaderOf(const Bytes& bytes, size_t* given) {
  *given = 0;
  return [&bytes, given](void* buf, size_t n) {
    if (*given + n > bytes.size()) return DataLossError("read past the chunk");
    std::memcpy(buf, bytes.data() + *given, n);
    *given += n;
    return Status::Ok();
  };
}

class ParityStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    group_.members = {10, 11, 12, 13, 14, 15, 16, 17};
    group_.kind = ec::Redundancy::Kind::kRs;
    group_.m = 2;
    // Steps of different sizes: chunks differ in length, the stripes pad.
    for (int p = 0; p < 8; ++p) steps_.push_back(Random(100000 + 3000 * p + p, 40 + p));
  }

  // Member p's chunk c (its bytes, unpadded).
  Bytes Chunk(int p, int c) const {
    const Bytes& s = steps_[p];
    const uint64_t cb = ec::ChunkBytes(s.size(), group_.k());
    const uint64_t from = std::min<uint64_t>(s.size(), c * cb);
    const uint64_t to = std::min<uint64_t>(s.size(), from + cb);
    return Bytes(s.begin() + static_cast<ptrdiff_t>(from), s.begin() + static_cast<ptrdiff_t>(to));
  }

  ParityHeader Where(int stripe, int row) const {
    ParityHeader h;
    h.job = "job1";
    h.step = 30;
    h.group = group_;
    h.stripe = stripe;
    h.row = row;
    return h;
  }

  wire::Contribution Of(int p, int chunk, const Bytes& bytes) const {
    wire::Contribution c;
    c.rank = group_.members[p];
    c.chunk = chunk;
    c.length = bytes.size();
    c.xxh3 = Xxh3(bytes.data(), bytes.size());
    c.step_digest = 1000 + p;
    c.index.digest = 1000 + p;
    c.index.total_bytes = steps_[p].size();
    c.index.files = {{"data.bin", steps_[p].size(), {Xxh3(steps_[p].data(), steps_[p].size())}}};
    return c;
  }

  // Adds member p's contribution to (stripe, row) of `store`.
  StatusOr<ParityStore::Added> Add(ParityStore& store, int stripe, int row, int p) {
    const int chunk = group_.layout().ChunkOf(p, stripe);
    const Bytes bytes = Chunk(p, chunk);
    size_t given;
    return store.Contribute(Where(stripe, row), Of(p, chunk, bytes), ReaderOf(bytes, &given));
  }

  Bytes ParityBytes(const ParityStore& store, const ParityKey& key) const {
    auto h = store.Get(key);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (h.ok()) testing::SaveFuzzSeed("state", EncodeParityHeader(*h));
    auto text = ReadFileToString(Env::Default(), store.PathOf(key), 1 << 30);
    EXPECT_TRUE(text.ok());
    return Bytes(text->begin(), text->begin() + static_cast<ptrdiff_t>(h->length));
  }

  testing::ScratchDir dir_{"parity"};
  ec::Group group_;
  std::vector<Bytes> steps_;
};

// Every shard of every stripe, built from contributions in a shuffled order,
// is the codec's encoding of the stripe's zero-padded chunks; and member 3
// and member 6 lost together are rebuilt from the rest.
TEST_F(ParityStoreTest, ShardsEqualTheEncodingAndDecodeLostMembers) {
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const ec::GroupLayout layout = group_.layout();
  std::mt19937 rng(5);
  auto codec = ec::Codec::Create(group_.code());
  ASSERT_TRUE(codec.ok());
  for (int s = 0; s < layout.stripes(); ++s) {
    std::vector<int> contributors = layout.Contributors(s);
    for (int row = 0; row < 2; ++row) {
      std::shuffle(contributors.begin(), contributors.end(), rng);
      for (int p : contributors) {
        auto added = Add(**store, s, row, p);
        ASSERT_TRUE(added.ok()) << added.status().ToString();
        EXPECT_EQ(*added, ParityStore::Added::kAdded);
      }
      const ParityKey key = Where(s, row).key();
      auto h = (*store)->Get(key);
      ASSERT_TRUE(h.ok());
      EXPECT_TRUE(h->complete());
      EXPECT_TRUE((*store)->Verify(key).ok());
    }
    // The codec's own encoding of the stripe.
    const std::vector<int> data = layout.Contributors(s);
    uint64_t len = 0;
    for (int p : data) len = std::max<uint64_t>(len, Chunk(p, layout.ChunkOf(p, s)).size());
    std::vector<Bytes> padded;
    for (int p : data) {
      Bytes c = Chunk(p, layout.ChunkOf(p, s));
      c.resize(len, 0);
      padded.push_back(std::move(c));
    }
    std::vector<const uint8_t*> in;
    for (const Bytes& b : padded) in.push_back(b.data());
    Bytes p0(len), p1(len);
    std::vector<uint8_t*> out = {p0.data(), p1.data()};
    codec->Encode(in, out, len);
    EXPECT_EQ(ParityBytes(**store, Where(s, 0).key()), p0) << "stripe " << s;
    EXPECT_EQ(ParityBytes(**store, Where(s, 1).key()), p1) << "stripe " << s;

    // Lose members 3 and 6: what they fed this stripe comes back.
    std::vector<int> have;
    std::vector<const uint8_t*> shards;
    std::vector<int> lost;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] == 3 || data[i] == 6) {
        lost.push_back(static_cast<int>(i));
      } else {
        have.push_back(static_cast<int>(i));
        shards.push_back(padded[i].data());
      }
    }
    const Bytes q0 = ParityBytes(**store, Where(s, 0).key());
    const Bytes q1 = ParityBytes(**store, Where(s, 1).key());
    for (int row = 0; have.size() < 6; ++row) {
      have.push_back(6 + row);
      shards.push_back(row == 0 ? q0.data() : q1.data());
    }
    std::vector<Bytes> rebuilt(lost.size(), Bytes(len));
    std::vector<uint8_t*> outs;
    for (Bytes& b : rebuilt) outs.push_back(b.data());
    ASSERT_TRUE(codec->Reconstruct(have, shards, lost, outs, len).ok());
    for (size_t i = 0; i < lost.size(); ++i) EXPECT_EQ(rebuilt[i], padded[lost[i]]);
  }
}

// The same contribution again (a sender retrying after a lost reply) is
// taken once: its bytes are read and dropped, the shard is unchanged.
// A header read back with integers its fields cannot hold is DATA_LOSS:
// get<int>() truncated 2^40 to 0 and cast floats before.
TEST_F(ParityStoreTest, AHeaderWithIntegersOutOfRangeIsDataLoss) {
  const std::string text = EncodeParityHeader(Where(1, 0));
  ASSERT_TRUE(DecodeParityHeader(text, "p/30.hdr").ok());
  const nlohmann::json good = nlohmann::json::parse(text);
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"row", 1ull << 40}, {"stripe", -1ll << 40}, {"step", 1.5}, {"length", -1}}) {
    nlohmann::json bad = good;
    bad[field] = value;
    auto h = DecodeParityHeader(bad.dump(), "p/30.hdr");
    ASSERT_FALSE(h.ok()) << field;
    EXPECT_EQ(h.status().code(), StatusCode::kDataLoss) << h.status().ToString();
  }
}

// The bytes this release writes, fixed: a parity shard's header on disk
// must still be read (and written the same) by every later release.
TEST(ParityHeaderTest, TheBytesOnDiskAreFixed) {
  constexpr char kGolden[] =
      R"({"contributions":[{"chunk":1,"digest":"00000000000000ab","index":{)"
      R"("digest":"00000000000000ab","files":[{"chunks":["0000000000000077"],"path":"data.bin",)"
      R"("size":10}],"strata":false,"total_bytes":10},"length":5,"rank":1,)"
      R"("xxh3":"00000000000000fe"}],"group":{"code":"xor","m":1,"members":[0,1,2]},)"
      R"("job":"job1","length":6,"row":0,"step":30,"stripe":0,"xxh3":"0000000000001234"})";
  ParityHeader h;
  h.job = "job1";
  h.step = 30;
  h.group = ec::Group{{0, 1, 2}, ec::Redundancy::Kind::kXor, 1};
  h.stripe = 0;
  h.row = 0;
  h.length = 6;
  h.xxh3 = 0x1234;
  wire::Contribution c;
  c.rank = 1;
  c.chunk = 1;
  c.length = 5;
  c.xxh3 = 0xfe;
  c.step_digest = 0xab;
  c.index.digest = 0xab;
  c.index.total_bytes = 10;
  c.index.files = {{"data.bin", 10, {0x77}}};
  h.contributions = {c};
  EXPECT_EQ(EncodeParityHeader(h), kGolden);
  auto back = DecodeParityHeader(kGolden, "p/30.hdr");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeParityHeader(*back), kGolden);
  EXPECT_EQ(back->contributions.at(0).index.files.at(0).path, "data.bin");
}

// A field of the header or of one of its contributions that cannot be read
// is named, with the contribution's entry and the file.
TEST(ParityHeaderTest, AMalformedFieldIsNamed) {
  ParityHeader h;
  h.job = "job1";
  h.step = 30;
  h.group = ec::Group{{0, 1, 2}, ec::Redundancy::Kind::kXor, 1};
  h.length = 6;
  wire::Contribution c;
  c.rank = 1;
  c.chunk = 1;
  c.length = 5;
  h.contributions = {c};
  const nlohmann::json good = nlohmann::json::parse(EncodeParityHeader(h));
  ASSERT_TRUE(DecodeParityHeader(good.dump(), "p/30.hdr").ok());
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"job", 1},
           {"xxh3", "12"},
           {"length", "6"},
           {"contributions", nlohmann::json::object()}}) {
    nlohmann::json bad = good;
    bad[field] = value;
    auto back = DecodeParityHeader(bad.dump(), "p/30.hdr");
    ASSERT_FALSE(back.ok()) << field;
    EXPECT_EQ(back.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(back.status().message().rfind("p/30.hdr: ", 0), 0u) << back.status().ToString();
    EXPECT_NE(back.status().message().find("\"" + field + "\""), std::string::npos)
        << back.status().ToString();
  }
  nlohmann::json bad = good;
  bad["contributions"].push_back(good["contributions"][0]);
  bad["contributions"][1]["digest"] = "x";
  auto back = DecodeParityHeader(bad.dump(), "p/30.hdr");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("\"contributions\": entry 1: a contribution: "
                                         "\"digest\" must be 16 hex digits"),
            std::string::npos)
      << back.status().ToString();
}

TEST_F(ParityStoreTest, AContributionIsTakenOnce) {
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default());
  ASSERT_TRUE(store.ok());
  const int chunk = group_.layout().ChunkOf(1, 3);
  const Bytes bytes = Chunk(1, chunk);
  size_t given;
  ASSERT_EQ(*(*store)->Contribute(Where(3, 0), Of(1, chunk, bytes), ReaderOf(bytes, &given)),
            ParityStore::Added::kAdded);
  const Bytes before = ParityBytes(**store, Where(3, 0).key());
  EXPECT_TRUE((*store)->Has(Where(3, 0).key(), group_.members[1], 1001));
  auto again = (*store)->Contribute(Where(3, 0), Of(1, chunk, bytes), ReaderOf(bytes, &given));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, ParityStore::Added::kAlreadyIn);
  EXPECT_EQ(given, bytes.size());  // drained
  EXPECT_EQ(ParityBytes(**store, Where(3, 0).key()), before);
  EXPECT_EQ((*store)->Get(Where(3, 0).key())->contributions.size(), 1u);
}

// Collection must not wait on a peer: a shard a contribution is being
// written to (its sender stalled) is left, at once, and removed once the
// contribution ended. Remove, for everyone else, waits.
TEST_F(ParityStoreTest, RemoveIfIdleLeavesAShardBeingWritten) {
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(Add(**store, 3, 0, 1).ok());
  const ParityKey key = Where(3, 0).key();
  const int p = 2, chunk = group_.layout().ChunkOf(p, 3);
  const Bytes bytes = Chunk(p, chunk);
  std::promise<void> go, reading;
  std::shared_future<void> released = go.get_future().share();
  std::future<void> in_reader = reading.get_future();
  size_t given = 0;
  auto stalled = [&](void* buf, size_t n) {
    if (given == 0) reading.set_value();
    released.wait();  // the sender's bytes have not come yet
    std::memcpy(buf, bytes.data() + given, n);
    given += n;
    return Status::Ok();
  };
  std::thread writer([&] {
    auto added = (*store)->Contribute(Where(3, 0), Of(p, chunk, bytes), stalled);
    EXPECT_TRUE(added.ok()) << added.status().ToString();
  });
  in_reader.wait();                                 // the contribution holds the shard
  const Status busy = (*store)->RemoveIfIdle(key);  // Remove would wait here for ever
  EXPECT_EQ(busy.code(), StatusCode::kUnavailable) << busy.ToString();
  EXPECT_TRUE((*store)->Get(key).ok()) << "a shard being written was removed";
  go.set_value();
  writer.join();
  EXPECT_EQ((*store)->Get(key)->contributions.size(), 2u);
  EXPECT_TRUE((*store)->RemoveIfIdle(key).ok());
  EXPECT_FALSE((*store)->Get(key).ok());
}

// A contribution whose sender went silent (gone without a reset) while
// another member's waits for the same shard: it is ended through its abort
// once it moved no byte for the contended-stall time, and the waiting one
// goes in. Without that, every other member's chunk of the step waited
// behind it for the sender's own stall limit, two minutes (the eight-node
// chaos job, rs(6,2), seed 116: the group coded nothing new meanwhile).
//
// The stall is an hour on a clock the test moves: only the store's clock can
// end the silent sender within the reader's 30 s.
TEST_F(ParityStoreTest, ASilentContributionIsEndedOnceAnotherWaitsForItsShard) {
  ManualClock clock;
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default(), std::chrono::hours(1), &clock);
  ASSERT_TRUE(store.ok());
  const int silent = 2, chunk = group_.layout().ChunkOf(silent, 3);
  const Bytes bytes = Chunk(silent, chunk);
  std::promise<void> reading;
  std::future<void> in_reader = reading.get_future();
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  auto never = [&](void*, size_t) {
    reading.set_value();
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(30), [&] { return aborted; });  // else its stall limit
    return UnavailableError("connection reset (test)");
  };
  auto abort = [&] {
    std::lock_guard<std::mutex> l(mu);
    aborted = true;
    cv.notify_all();
  };
  StatusOr<ParityStore::Added> gone = InternalError("not run");
  std::thread writer(
      [&] { gone = (*store)->Contribute(Where(3, 0), Of(silent, chunk, bytes), never, abort); });
  in_reader.wait();  // the silent contribution holds the shard
  std::atomic<bool> done{false};
  std::thread time_passes([&] {
    while (!done) {
      clock.Advance(std::chrono::minutes(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const auto added = Add(**store, 3, 0, 1);
  done = true;
  time_passes.join();
  writer.join();
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_TRUE(aborted) << "the waiting contribution went in only once the silent one gave up";
  EXPECT_FALSE(gone.ok());
  const auto h = (*store)->Get(Where(3, 0).key());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->contributions.size(), 1u);
  EXPECT_EQ(h->contributions[0].rank, group_.members[1]);
}

// A slow sender that keeps moving bytes is not ended, however long its
// whole chunk takes: each piece that arrives counts as progress.
// Here each piece takes 40 minutes of an hour's stall on the store's clock,
// two hours in all.
TEST_F(ParityStoreTest, ASlowContributionThatMovesIsNotEnded) {
  ManualClock clock;
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default(), std::chrono::hours(1), &clock);
  ASSERT_TRUE(store.ok());
  const int slow = 2, chunk = group_.layout().ChunkOf(slow, 3);
  steps_[slow] = Random(6 * 700000, 77);  // chunks of 700,000 bytes: three pieces
  const Bytes bytes = Chunk(slow, chunk);
  std::promise<void> reading;
  std::future<void> in_reader = reading.get_future();
  size_t given = 0;
  int reads = 0;
  auto trickle = [&](void* buf, size_t n) {
    if (reads++ == 0) reading.set_value();
    clock.Advance(std::chrono::minutes(40));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the waiter looks
    std::memcpy(buf, bytes.data() + given, n);
    given += n;
    return Status::Ok();
  };
  std::atomic<bool> aborted{false};
  StatusOr<ParityStore::Added> first = InternalError("not run");
  std::thread writer([&] {
    first =
        (*store)->Contribute(Where(3, 0), Of(slow, chunk, bytes), trickle, [&] { aborted = true; });
  });
  in_reader.wait();
  const auto second = Add(**store, 3, 0, 1);  // waits its turn
  writer.join();
  EXPECT_FALSE(aborted);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GE(reads, 3);
  EXPECT_EQ((*store)->Get(Where(3, 0).key())->contributions.size(), 2u);
}

// Given the shard as it was listed, the shard goes while it still holds a
// contribution listed (one added since does not save it: the rest is the
// old history's), and stays once it started over with only newer ones.
TEST_F(ParityStoreTest, RemoveIfIdleWithAListingLeavesAShardThatStartedOverSince) {
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default());
  ASSERT_TRUE(store.ok());
  const int p = 1, chunk = group_.layout().ChunkOf(p, 0);
  ASSERT_TRUE(Add(**store, 0, 0, p).ok());
  const ParityKey key = Where(0, 0).key();
  const ParityHeader listed = (*store)->List().at(key);
  wire::Contribution again = Of(p, chunk, Chunk(p, chunk));
  again.step_digest = 99;  // member 1 saved the step again, in the new history
  size_t given;
  ASSERT_TRUE((*store)->Contribute(Where(0, 0), again, ReaderOf(Chunk(p, chunk), &given)).ok());
  const Status kept = (*store)->RemoveIfIdle(key, &listed);
  EXPECT_EQ(kept.code(), StatusCode::kFailedPrecondition) << kept.ToString();
  ASSERT_TRUE((*store)->Get(key).ok()) << "a shard of the new history was removed";
  EXPECT_EQ((*store)->Get(key)->contributions[0].step_digest, 99u);

  // A shard that still holds a listed contribution goes, also with one more.
  const ParityHeader relisted = (*store)->List().at(key);
  ASSERT_TRUE(Add(**store, 0, 0, 2).ok());
  EXPECT_TRUE((*store)->RemoveIfIdle(key, &relisted).ok());
  EXPECT_FALSE((*store)->Get(key).ok());
  EXPECT_EQ((*store)->RemoveIfIdle(key, &relisted).code(), StatusCode::kFailedPrecondition);
}

// Bytes that do not match their checksum change nothing; a contributor that
// does not feed the stripe is refused; a member's other step starts over.
TEST_F(ParityStoreTest, BadContributionsChangeNothing) {
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(Add(**store, 0, 0, 1).ok());
  const Bytes before = ParityBytes(**store, Where(0, 0).key());
  const int chunk = group_.layout().ChunkOf(2, 0);
  Bytes bytes = Chunk(2, chunk);
  wire::Contribution c = Of(2, chunk, bytes);
  bytes[17] ^= 1;  // flipped on the way
  size_t given;
  auto flipped = (*store)->Contribute(Where(0, 0), c, ReaderOf(bytes, &given));
  EXPECT_EQ(flipped.status().code(), StatusCode::kDataLoss) << flipped.status().ToString();
  EXPECT_NE(flipped.status().message().find("does not match its checksum"), std::string::npos);
  EXPECT_EQ(ParityBytes(**store, Where(0, 0).key()), before);
  EXPECT_EQ((*store)->Get(Where(0, 0).key())->contributions.size(), 1u);

  // Member 0 holds stripe 0's first parity row: it feeds no data to it.
  wire::Contribution wrong = Of(0, 0, Chunk(0, 0));
  auto refused = (*store)->Contribute(Where(0, 0), wrong, ReaderOf(bytes, &given));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);

  wire::Contribution again =
      Of(1, group_.layout().ChunkOf(1, 0), Chunk(1, group_.layout().ChunkOf(1, 0)));
  again.step_digest = 99;  // member 1 saved step 30 again, other bytes
  const Bytes one = Chunk(1, group_.layout().ChunkOf(1, 0));
  ASSERT_TRUE((*store)->Contribute(Where(0, 0), again, ReaderOf(one, &given)).ok());
  auto h = (*store)->Get(Where(0, 0).key());
  ASSERT_EQ(h->contributions.size(), 1u);
  EXPECT_EQ(h->contributions[0].step_digest, 99u);
}

// A contribution whose commit (the rename) fails leaves the shard as it
// was, and no second name for it: the next contribution, failing half way,
// must not have written into the shard the store holds.
TEST_F(ParityStoreTest, AFailedCommitLeavesNoSpareThatIsTheHeldShard) {
  const std::vector<int> from = group_.layout().Contributors(5);
  testing::FaultInjectionEnv env;
  auto store = ParityStore::Open(dir_.Sub("p"), &env);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(Add(**store, 5, 0, from[0]).ok());
  const Bytes before = ParityBytes(**store, Where(5, 0).key());
  ASSERT_FALSE(before.empty());
  env.FailAt(testing::Op::kRename, 1, EIO);
  EXPECT_FALSE(Add(**store, 5, 0, from[1]).ok());
  env.Clear();
  EXPECT_EQ(ParityBytes(**store, Where(5, 0).key()), before);

  const int chunk = group_.layout().ChunkOf(from[2], 5);
  Bytes bytes = Chunk(from[2], chunk);
  wire::Contribution c = Of(from[2], chunk, bytes);
  bytes[bytes.size() - 1] ^= 1;  // found only once every byte was written
  size_t given;
  auto flipped = (*store)->Contribute(Where(5, 0), c, ReaderOf(bytes, &given));
  EXPECT_EQ(flipped.status().code(), StatusCode::kDataLoss) << flipped.status().ToString();
  EXPECT_EQ(ParityBytes(**store, Where(5, 0).key()), before);
  EXPECT_TRUE((*store)->Verify(Where(5, 0).key()).ok());
  ASSERT_TRUE(Add(**store, 5, 0, from[1]).ok());
  EXPECT_TRUE((*store)->Verify(Where(5, 0).key()).ok());
}

// Shards are found again by a new ParityStore; a damaged one and a
// temporary are removed; corrupt parity bytes fail Verify.
TEST_F(ParityStoreTest, ShardsSurviveAReopenAndDamageIsFound) {
  {
    auto store = ParityStore::Open(dir_.Sub("p"), Env::Default());
    ASSERT_TRUE(store.ok());
    for (int p : group_.layout().Contributors(2)) ASSERT_TRUE(Add(**store, 2, 1, p).ok());
    ASSERT_TRUE(Add(**store, 4, 0, group_.layout().Contributors(4)[0]).ok());
  }
  auto store = ParityStore::Open(dir_.Sub("p"), Env::Default());
  ASSERT_TRUE(store.ok());
  ASSERT_EQ((*store)->List().size(), 2u);
  EXPECT_TRUE((*store)->Get(Where(2, 1).key())->complete());
  EXPECT_FALSE((*store)->Get(Where(4, 0).key())->complete());
  EXPECT_TRUE((*store)->Verify(Where(2, 1).key()).ok());
  const uint64_t bytes = (*store)->BytesHeld();
  EXPECT_GT(bytes, 0u);

  const std::string damaged = (*store)->PathOf(Where(4, 0).key());
  auto text = ReadFileToString(Env::Default(), damaged, 1 << 30);
  ASSERT_TRUE(text.ok());
  (*text)[text->size() - 30] ^= 1;  // in the header
  testing::WriteFile(damaged, *text);
  const std::string parity = (*store)->PathOf(Where(2, 1).key());
  text = ReadFileToString(Env::Default(), parity, 1 << 30);
  (*text)[5] ^= 1;  // in the parity bytes
  testing::WriteFile(parity, *text);
  testing::WriteFile(JoinPath(Dirname(parity), ".strata-tmp-x"), "half a shard");
  store->reset();
  store = ParityStore::Open(dir_.Sub("p"), Env::Default());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->List().size(), 1u);
  EXPECT_FALSE(Env::Default()->Exists(damaged));
  EXPECT_FALSE(Env::Default()->Exists(JoinPath(Dirname(parity), ".strata-tmp-x")));
  EXPECT_EQ((*store)->Verify(Where(2, 1).key()).code(), StatusCode::kDataLoss);
  ASSERT_TRUE((*store)->Remove(Where(2, 1).key()).ok());
  EXPECT_EQ((*store)->BytesHeld(), 0u);
}

// A power cut at any call of a second contribution leaves the one-
// contribution shard or the two-contribution one, never a mix.
TEST_F(ParityStoreTest, APowerCutLeavesTheOldShardOrTheNew) {
  const int a = group_.layout().Contributors(5)[0], b = group_.layout().Contributors(5)[1];
  for (int n = 1;; ++n) {
    testing::ScratchDir dir("parity-cut");
    testing::FaultInjectionEnv env;
    Bytes one, two;
    {
      auto store = ParityStore::Open(dir.Sub("p"), &env);
      ASSERT_TRUE(store.ok());
      ASSERT_TRUE(Add(**store, 5, 0, a).ok());
      one = ParityBytes(**store, Where(5, 0).key());
      env.CutPowerAfter(n);
      auto added = Add(**store, 5, 0, b);
      if (added.ok()) two = ParityBytes(**store, Where(5, 0).key());
    }
    const bool finished = !env.power_cut();
    env.DropUnsyncedData();
    auto store = ParityStore::Open(dir.Sub("p"), Env::Default());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto h = (*store)->Get(Where(5, 0).key());
    ASSERT_TRUE(h.ok()) << "cut after " << n << ": " << h.status().ToString();
    const Bytes now = ParityBytes(**store, Where(5, 0).key());
    EXPECT_TRUE((*store)->Verify(Where(5, 0).key()).ok()) << "cut after " << n;
    if (h->contributions.size() == 1) {
      EXPECT_EQ(now, one) << "cut after " << n;
    } else {
      EXPECT_EQ(h->contributions.size(), 2u);
      if (!two.empty()) {
        EXPECT_EQ(now, two) << "cut after " << n;
      }
    }
    if (finished) {
      EXPECT_EQ(h->contributions.size(), 2u);
      break;
    }
    ASSERT_LT(n, 100);
  }
}

}  // namespace
}  // namespace strata::agent
