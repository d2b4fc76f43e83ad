// Copyright 2026 The Strata Authors.
//
// The agent's store: removed steps leave spare files that the next transfer
// receives into, within a limit of about one step; seals prove held copies
// unchanged at a restart without reading them.
#include "agent/store/store.h"

#include <gtest/gtest.h>
#include <time.h>

#include <filesystem>
#include <set>
#include <thread>

#include "agent/rpc/client.h"
#include "agent/rpc/step_stream.h"
#include "agent/store/step_seal.h"
#include "fault_env.h"
#include "net/socket.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A client step directory with two files of the given sizes.
std::string MakeClientStep(const std::string& local, const std::string& name, size_t a, size_t b,
                           char fill) {
  std::string dir = JoinPath(local, name);
  fs::create_directories(dir);
  testing::WriteFile(JoinPath(dir, "a.bin"), std::string(a, fill));
  testing::WriteFile(JoinPath(dir, "b.bin"), std::string(b, static_cast<char>(fill + 1)));
  return dir;
}

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_.path(), &pool_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  std::string SpareDir() const { return JoinPath(store_->root(), "spare"); }

  testing::ScratchDir dir_{"store"};
  ThreadPool pool_{1};
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, ARemovedStepLeavesSpareFilesUpToOneStep) {
  const wire::StepKey one{"j", 0, 1}, two{"j", 0, 2};
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "c1", 3000, 1000, 'a'), one).ok());
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "c2", 3000, 1000, 'c'), two).ok());
  ASSERT_TRUE(store_->Remove(one).ok());
  EXPECT_EQ(store_->SpareBytes(), 4000u);
  EXPECT_EQ(FilesIn(SpareDir()), 2u);
  EXPECT_FALSE(fs::exists(store_->StepPath(one)));
  ASSERT_TRUE(store_->Remove(two).ok());  // over the limit (one step): deleted
  EXPECT_EQ(store_->SpareBytes(), 4000u);
  EXPECT_EQ(FilesIn(SpareDir()), 2u);

  std::string to = JoinPath(dir_.path(), "taken");
  ASSERT_TRUE(store_->TakeSpare(2500, to));  // the smallest that holds it: 3000
  EXPECT_EQ(fs::file_size(to), 3000u);
  EXPECT_EQ(store_->SpareBytes(), 1000u);
  EXPECT_FALSE(store_->TakeSpare(10, to));  // never replaces an existing file
  store_->DropSpare();
  EXPECT_EQ(store_->SpareBytes(), 0u);
  EXPECT_EQ(FilesIn(SpareDir()), 0u);
  EXPECT_FALSE(store_->TakeSpare(10, JoinPath(dir_.path(), "none")));
}

TEST_F(StoreTest, ReopeningEmptiesTheSpareFiles) {
  const wire::StepKey one{"j", 0, 1};
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "c1", 100, 100, 'a'), one).ok());
  ASSERT_TRUE(store_->Remove(one).ok());
  const std::string spare = SpareDir();
  ASSERT_EQ(FilesIn(spare), 2u);
  store_.reset();
  auto s = Store::Open(dir_.path(), &pool_);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(FilesIn(spare), 0u);
  EXPECT_EQ((*s)->SpareBytes(), 0u);
}

// A transfer into spare files that are longer, shorter or absent ends with
// exactly the sent bytes, and the step verifies.
TEST_F(StoreTest, ATransferReceivesIntoSpareFilesAndVerifies) {
  const wire::StepKey old_step{"j", 1, 1}, sent{"j", 1, 2};
  ASSERT_TRUE(store_->Ingest(MakeClientStep(dir_.path(), "old", 5000, 10, 'x'), old_step).ok());
  ASSERT_TRUE(store_->Remove(old_step).ok());  // spare: 5000 and 10 bytes
  ASSERT_EQ(store_->SpareBytes(), 5010u);

  testing::ScratchDir src("store-src");
  std::string step_dir = MakeClientStep(src.path(), "s", 4000, 700, 'p');
  auto index = BuildStepIndex(Env::Default(), step_dir, &pool_);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  testing::SaveFuzzSeed("state", EncodeStepIndex(*index));

  auto listener = net::Socket::Listen("127.0.0.1", 0, 4);
  ASSERT_TRUE(listener.ok());
  auto port = listener->LocalPort();
  ASSERT_TRUE(port.ok());
  Status sent_status;
  std::thread sender([&] {
    auto c = net::Socket::Connect("127.0.0.1", *port, 5s);
    sent_status = c.ok() ? SendStepFiles(*c, step_dir, *index) : c.status();
  });
  auto server = listener->Accept(5s);
  ASSERT_TRUE(server.ok());
  auto incoming = store_->NewIncomingDir();
  ASSERT_TRUE(incoming.ok());
  Status received = RecvStepFiles(*server, *incoming, *index, store_.get());
  sender.join();
  ASSERT_TRUE(sent_status.ok()) << sent_status.ToString();
  ASSERT_TRUE(received.ok()) << received.ToString();
  EXPECT_EQ(store_->SpareBytes(), 0u);                            // both spare files were used
  EXPECT_EQ(fs::file_size(JoinPath(*incoming, "a.bin")), 4000u);  // 5000 truncated
  EXPECT_EQ(fs::file_size(JoinPath(*incoming, "b.bin")), 700u);   // 10 extended
  ASSERT_TRUE(store_->Adopt(*incoming, sent, *index).ok());
  EXPECT_TRUE(store_->Verify(sent).ok());
  EXPECT_EQ(testing::ReadFile(JoinPath(store_->StepPath(sent), "a.bin")), std::string(4000, 'p'));
}

// Lets the file-time clock tick past the files just written: a file
// modified in the tick a listing began in is never proven by a seal.
void PassAClockTick() {
  struct timespec res;
  ::clock_getres(CLOCK_REALTIME_COARSE, &res);
  std::this_thread::sleep_for(std::chrono::nanoseconds(res.tv_nsec) * 3 + 1ms);
}

// A restart proves held copies unchanged by their seals without reading
// them; whatever could have changed is read and verified.
TEST_F(StoreTest, SealsProveUnchangedCopiesAndCatchChangedOnes) {
  const wire::StepKey one{"j", 0, 1}, two{"j", 0, 2}, three{"j", 0, 3};
  std::string c1 = MakeClientStep(dir_.path(), "c1", 3000, 1000, 'a');
  std::string c2 = MakeClientStep(dir_.path(), "c2", 3000, 1000, 'c');
  std::string c3 = MakeClientStep(dir_.path(), "c3", 3000, 1000, 'e');
  PassAClockTick();
  ASSERT_TRUE(store_->Ingest(c1, one).ok());
  ASSERT_TRUE(store_->Ingest(c2, two).ok());
  ASSERT_TRUE(store_->Ingest(c3, three).ok());
  // The agent restarts.
  store_.reset();
  auto reopened = Store::Open(dir_.path(), &pool_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_ = std::move(*reopened);
  for (const wire::StepKey& key : {one, two, three}) {
    auto read = store_->CheckHeld(key);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_FALSE(*read) << key.ToString() << " was read; its seal should prove it";
  }
  // Step 1: a byte changed in place (with its time restored, as a stray
  // writer that kept it could not: ctime moves too). Step 2: the same bytes
  // written again. Step 3: a file added.
  const std::string a1 = JoinPath(store_->StepPath(one), "a.bin");
  auto mtime = fs::last_write_time(a1);
  testing::FlipByte(a1, 10);
  fs::last_write_time(a1, mtime);
  testing::WriteFile(JoinPath(store_->StepPath(two), "b.bin"), std::string(1000, 'd'));
  testing::WriteFile(JoinPath(store_->StepPath(three), "extra"), "x");
  auto corrupt = store_->CheckHeld(one);
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss) << corrupt.status().ToString();
  auto rewritten = store_->CheckHeld(two);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status().ToString();
  EXPECT_TRUE(*rewritten) << "a rewritten file must be read again";
  auto extra = store_->CheckHeld(three);
  EXPECT_EQ(extra.status().code(), StatusCode::kDataLoss) << extra.status().ToString();
  // Step 2 verified and was sealed again: once its files are older than the
  // seal's listing, the seal proves it.
  PassAClockTick();
  ASSERT_TRUE(store_->Remove(two).ok());
  std::string c4 = MakeClientStep(dir_.path(), "c4", 10, 10, 'g');
  PassAClockTick();
  ASSERT_TRUE(store_->Ingest(c4, two).ok());
  auto again = store_->CheckHeld(two);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(*again);
}

// A step ingested the moment its client wrote it (its files' mtime in the
// clock tick the listing began in, "racily clean") is listed again a tick
// later, so its seal proves it. Without a seal, or with one of another
// index, the bytes are read.
TEST_F(StoreTest, AFreshStepIsProvenAndAMissingOrForeignSealMeansReading) {
  const wire::StepKey key{"j", 0, 1};
  std::string dir = MakeClientStep(dir_.path(), "c1", 100, 100, 'a');
  ASSERT_TRUE(store_->Ingest(dir, key).ok());
  const std::string seal = store_->StepPath(key) + ".seal";
  ASSERT_TRUE(fs::exists(seal));
  auto fresh = store_->CheckHeld(key);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_FALSE(*fresh) << "a step sealed right after its write must still be proven";
  // A lost seal means a full read.
  fs::remove(seal);
  auto read = store_->CheckHeld(key);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(*read);
  EXPECT_TRUE(fs::exists(seal));
  // A seal of another index is not a proof either.
  testing::WriteFile(seal, R"({"index_digest":"0000000000000001","listed_at_ns":1,"files":[]})");
  auto other = store_->CheckHeld(key);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_TRUE(*other);
}

// A file stamped in the future (a skewed clock) is never waited for and
// never proven by a seal: the copy is read at every restart.
TEST_F(StoreTest, AFileFromTheFutureIsIngestedAndAlwaysRead) {
  const wire::StepKey key{"j", 0, 1};
  std::string dir = MakeClientStep(dir_.path(), "c1", 100, 100, 'a');
  fs::last_write_time(JoinPath(dir, "a.bin"), fs::file_time_type::clock::now() + 24h);
  ASSERT_TRUE(store_->Ingest(dir, key).ok());
  for (int restart = 0; restart < 2; ++restart) {
    auto read = store_->CheckHeld(key);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(*read) << "restart " << restart;
  }
}

// A power cut at every point of a store's work (ingesting a client's step,
// adopting a replica, replacing and removing copies), the disk then left
// as the cut would leave it (FaultInjectionEnv::DropUnsyncedData): every
// copy the store acknowledged is there after a restart, and every copy it
// lists verifies.
TEST(StorePowerCutTest, AcknowledgedCopiesSurviveAndNoneIsCorrupt) {
  int cuts = 0;
  for (int cut = 0;; ++cut) {
    SCOPED_TRACE("power cut after " + std::to_string(cut) + " changing calls");
    testing::ScratchDir d("powercut");
    ThreadPool pool{1};
    testing::FaultInjectionEnv env;
    std::set<wire::StepKey> acked;
    {
      auto store = Store::Open(d.path(), &pool, &env);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      env.CutPowerAfter(cut);
      for (int64_t step = 1; step <= 4; ++step) {
        // Steps 1 and 3 come from the client; 2 and 4 arrive from a peer
        // (written around the Env, as a socket writes them).
        const wire::StepKey key{"j", step % 2 == 0 ? 1 : 0, step};
        Status s;
        if (step % 2 == 1) {
          std::string dir =
              MakeClientStep(d.path(), "c" + std::to_string(step), 5000, 100, 'a' + step);
          s = (*store)->Ingest(dir, key).status();
        } else {
          auto in = (*store)->NewIncomingDir();
          s = in.status();
          if (s.ok()) {
            testing::WriteFile(JoinPath(*in, "a.bin"), std::string(3000, 'p' + step));
            auto index = BuildStepIndex(Env::Default(), *in, &pool);
            s = index.ok() ? (*store)->Adopt(*in, key, *index) : index.status();
          }
        }
        if (s.ok()) acked.insert(key);
      }
      // One copy dropped, as a newer one supersedes it: from the call on,
      // either outcome is right (if listed, it must still verify).
      acked.erase({"j", 0, 1});
      (*store)->Remove({"j", 0, 1}).IgnoreError();
    }
    const bool past_the_end = !env.power_cut();
    env.DropUnsyncedData();
    auto store = Store::Open(d.path(), &pool);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (const wire::StepKey& key : acked) {
      EXPECT_TRUE((*store)->Has(key)) << key.ToString() << " was acknowledged and is gone";
    }
    for (const auto& [key, index] : (*store)->List()) {
      Status v = (*store)->Verify(key);
      EXPECT_TRUE(v.ok()) << key.ToString() << ": " << v.ToString();
    }
    ++cuts;
    if (past_the_end || ::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(cuts, 20) << "the scenario should make many changing calls";
}

// A seal read back: the same identities; another index's seal is
// FAILED_PRECONDITION; anything malformed (also a digest of the wrong JSON
// type) is DATA_LOSS naming the file, never an exception.
// A peer's index (and the agent's own .index files) with sizes that are not
// integers of their type: each is DATA_LOSS, never converted. Found by the
// wire fuzz target: a float size was cast to uint64_t (undefined behaviour),
// and a negative one or one that overflows the sum wrapped into a match.
TEST(StepIndexCodecTest, SizesThatAreNotUnsignedIntegersAreDataLoss) {
  auto index = [](const std::string& sizes, const std::string& total) {
    std::string files;
    for (size_t i = 0, n = 0; i < sizes.size(); ++n) {
      size_t comma = sizes.find(',', i);
      if (comma == std::string::npos) comma = sizes.size();
      files += std::string(n ? "," : "") + "{\"path\":\"f" + std::to_string(n) +
               "\",\"size\":" + sizes.substr(i, comma - i) + ",\"chunks\":[]}";
      i = comma + 1;
    }
    return "{\"strata\":true,\"digest\":\"0000000000000001\",\"total_bytes\":" + total +
           ",\"files\":[" + files + "]}";
  };
  ASSERT_TRUE(DecodeStepIndex(index("10", "10"), "peer 3").ok());
  for (const auto& [sizes, total] : std::vector<std::pair<std::string, std::string>>{
           {"1.5", "1"},                       // a float, truncated to 1
           {"4.4e53", "0"},                    // a float beyond uint64_t
           {"-1,11", "10"},                    // wraps to 2^64-1, the sum to 10
           {"18446744073709551615,11", "10"},  // the sum overflows to 10
           {"10", "18446744073709551616"}}) {  // total beyond uint64_t
    auto decoded = DecodeStepIndex(index(sizes, total), "peer 3");
    ASSERT_FALSE(decoded.ok()) << sizes << " / " << total;
    EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss) << decoded.status().ToString();
    EXPECT_NE(decoded.status().message().find("peer 3"), std::string::npos);
  }
}

// A bad file entry of an index is named by its place in "files".
TEST(StepIndexCodecTest, ABadFileEntryIsNamed) {
  const std::string head =
      R"({"strata":false,"digest":"0000000000000001","total_bytes":2,"files":[)";
  const std::string first = R"({"path":"a","size":1,"chunks":["0000000000000002"]},)";
  auto bad_chunk =
      DecodeStepIndex(head + first + R"({"path":"b","size":1,"chunks":["xyz"]}]})", "peer 3");
  ASSERT_FALSE(bad_chunk.ok());
  EXPECT_EQ(bad_chunk.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad_chunk.status().message().find("files[1] (b): chunk 0: bad checksum"),
            std::string::npos)
      << bad_chunk.status().ToString();
  auto no_path =
      DecodeStepIndex(head + first + R"({"size":1,"chunks":["0000000000000002"]}]})", "peer 3");
  ASSERT_FALSE(no_path.ok());
  EXPECT_NE(no_path.status().message().find("malformed step index at files[1]"), std::string::npos)
      << no_path.status().ToString();
}

TEST(SealTest, ASealRoundTripsAndAMalformedOneIsDataLoss) {
  StepIdentity id;
  id.listed_at_ns = 1700000000123456789;
  id.files = {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}};
  const std::string text = EncodeSeal(0xabcdef, id);
  testing::SaveFuzzSeed("state", text);
  auto back = DecodeSeal(text, 0xabcdef, "s/20.seal");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->listed_at_ns, id.listed_at_ns);
  EXPECT_EQ(back->files, id.files);
  EXPECT_EQ(DecodeSeal(text, 0xabcdee, "s/20.seal").status().code(),
            StatusCode::kFailedPrecondition);
  nlohmann::json doc = nlohmann::json::parse(text);
  doc["index_digest"] = 42;
  auto bad = DecodeSeal(doc.dump(), 0xabcdef, "s/20.seal");
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("s/20.seal"), std::string::npos);
  EXPECT_EQ(DecodeSeal("{not json", 0xabcdef, "s/20.seal").status().code(), StatusCode::kDataLoss);
}

// The bytes this release writes, fixed: a seal on disk must still be read
// (and written the same) by every later release.
TEST(SealTest, TheBytesOnDiskAreFixed) {
  constexpr char kGolden[] =
      R"({"files":[[1,2,3,4,5],[6,7,8,9,10]],"index_digest":"0000000000abcdef",)"
      R"("listed_at_ns":1700000000123456789})";
  StepIdentity id;
  id.listed_at_ns = 1700000000123456789;
  id.files = {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}};
  EXPECT_EQ(EncodeSeal(0xabcdef, id), kGolden);
  auto back = DecodeSeal(kGolden, 0xabcdef, "s/20.seal");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->listed_at_ns, id.listed_at_ns);
  EXPECT_EQ(back->files, id.files);
}

// A field of a seal that cannot be read is named, with the file entry.
TEST(SealTest, AMalformedFieldIsNamed) {
  StepIdentity id;
  id.files = {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}};
  const nlohmann::json good = nlohmann::json::parse(EncodeSeal(0xabcdef, id));
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"index_digest", 42},
           {"listed_at_ns", "1"},
           {"files", nlohmann::json::parse("[[1,2,3,4,5],[6,7,-8,9,10]]")}}) {
    nlohmann::json bad = good;
    bad[field] = value;
    auto back = DecodeSeal(bad.dump(), 0xabcdef, "s/20.seal");
    ASSERT_FALSE(back.ok()) << field;
    EXPECT_EQ(back.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(back.status().message().find("s/20.seal"), std::string::npos);
    EXPECT_NE(back.status().message().find("\"" + field + "\""), std::string::npos)
        << back.status().ToString();
  }
  nlohmann::json bad = good;
  bad["files"][1][2] = -8;
  EXPECT_NE(DecodeSeal(bad.dump(), 0xabcdef, "s/20.seal").status().message().find("entry 1"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::agent
