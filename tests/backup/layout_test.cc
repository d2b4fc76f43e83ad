// Copyright 2026 The Strata Authors.
//
// Backup ids, object keys, the part and commit JSON, and ListBackups over an
// in-memory store (which can fail on demand).
#include "backup/layout.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "test_util.h"

namespace strata::backup {
namespace {

using json = nlohmann::json;

// An ObjectStore over a std::map; Get of a key in `fail_get` fails with
// `fail_status`.
class MemStore : public storage::ObjectStore {
 public:
  const std::string& url() const override { return url_; }
  Status Put(const std::string& key, std::string_view data) override {
    std::lock_guard<std::mutex> l(mu_);
    objects_[key] = std::string(data);
    return Status::Ok();
  }
  Status PutFile(const std::string&, const std::string&) override {
    return UnimplementedError("PutFile");
  }
  StatusOr<std::string> Get(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_get.count(key)) return fail_status;
    auto it = objects_.find(key);
    if (it == objects_.end()) return NotFoundError(url_ + ": no object " + key);
    return it->second;
  }
  StatusOr<uint64_t> GetFile(const std::string&, const std::string&) override {
    return UnimplementedError("GetFile");
  }
  StatusOr<std::vector<storage::ObjectInfo>> List(const std::string& prefix) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<storage::ObjectInfo> out;
    for (const auto& [k, v] : objects_)
      if (k.starts_with(prefix)) out.push_back({k, v.size()});
    return out;
  }
  Status Delete(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    objects_.erase(key);
    return Status::Ok();
  }
  Status CheckAccess() override { return Status::Ok(); }

  std::set<std::string> fail_get;
  Status fail_status = UnavailableError("mem://test: GetObject failed: connection reset");

 private:
  std::string url_ = "mem://test";
  std::mutex mu_;
  std::map<std::string, std::string> objects_;
};

BackupId Id(std::string_view text) {
  auto id = ParseBackupId(text);
  EXPECT_TRUE(id.ok()) << text << ": " << id.status().ToString();
  return id.value_or(BackupId{});
}

Commit SampleCommit(const std::string& id) {
  Commit c;
  c.id = id;
  c.job = "llama";
  c.step = 400;
  c.nodes = 4;
  c.data_parallelism = 2;
  c.created = Id(id).minute + 12;
  c.committed = c.created + 300;
  c.sources = {{0, 0}, {1, 1}, {2, 0}, {3, 1}};
  c.part_bytes = {{0, 1000}, {1, 2000}};
  c.part_digests = {{0, 0x0123456789abcdefULL}, {1, 42}};
  return c;
}

PartMeta SamplePart(const std::string& id, int part) {
  PartMeta m;
  m.id = id;
  m.job = "llama";
  m.part = part;
  m.step = 400;
  m.index = json{{"digest", "0000000000000001"}, {"files", json::array()}};
  m.bytes = 1000;
  m.digest = 0xfedcba9876543210ULL;
  return m;
}

TEST(BackupIdTest, ParseAndFormatRoundTrip) {
  for (const char* text : {"2026-11-21_04-30", "2026-11-21_04-30.2", "2026-11-21_04-30.17",
                           "1970-01-01_00-00", "2028-02-29_23-59", "9999-12-31_23-59.999999"}) {
    auto id = ParseBackupId(text);
    ASSERT_TRUE(id.ok()) << text << ": " << id.status().ToString();
    EXPECT_EQ(id->ToString(), text);
    EXPECT_EQ(id->minute % 60, 0);
  }
  auto id = Id("2026-11-21_04-30.3");
  EXPECT_EQ(id.minute, 1795235400);
  EXPECT_EQ(id.sequence, 3);
  EXPECT_EQ(Id("2026-11-21_04-30").sequence, 1);
}

TEST(BackupIdTest, RejectsMalformedIds) {
  for (const char* text : {"",
                           "2026-11-21",
                           "2026-11-21_04-30.",
                           "2026-11-21_04-30.1",
                           "2026-11-21_04-30.02",
                           "2026-11-21_04-30.0",
                           "2026-11-21_04-30.-2",
                           "2026-11-21_04-30.+2",
                           "2026-11-21_04-30x",
                           "2026-11-21_04-30.2x",
                           "2026-11-21_04-30.1234567",
                           "2026-11-21 04-30",
                           "2026-11-21_4-30",
                           "2026-13-01_00-00",
                           "2026-00-01_00-00",
                           "2026-02-29_00-00",
                           "2026-04-31_00-00",
                           "2026-11-00_00-00",
                           "2026-11-21_24-00",
                           "2026-11-21_23-60",
                           "1969-12-31_23-59",
                           "+026-11-21_04-30",
                           "2026-11-21_04-30/",
                           " 2026-11-21_04-30",
                           ".strata-probe"}) {
    auto id = ParseBackupId(text);
    ASSERT_FALSE(id.ok()) << "accepted " << text;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  }
  auto id = ParseBackupId("2026-11-21_04-30.02");
  EXPECT_NE(id.status().message().find("\"2026-11-21_04-30.02\""), std::string::npos);
}

TEST(BackupIdTest, IdsOrderByTimeThenSequence) {
  EXPECT_LT(Id("2026-11-21_04-30"), Id("2026-11-21_04-30.2"));
  EXPECT_LT(Id("2026-11-21_04-30.2"), Id("2026-11-21_04-30.10"));
  EXPECT_LT(Id("2026-11-21_04-30.10"), Id("2026-11-21_04-31"));
}

TEST(BackupIdTest, NewBackupIdTakesTheLowestFreeSequenceOfTheMinute) {
  const std::time_t now = Id("2026-11-21_04-30").minute + 59;
  EXPECT_EQ(NewBackupId(now, {}).ToString(), "2026-11-21_04-30");
  std::vector<BackupId> existing = {Id("2026-11-21_04-29"), Id("2026-11-21_04-31")};
  EXPECT_EQ(NewBackupId(now, existing).ToString(), "2026-11-21_04-30");
  existing.push_back(NewBackupId(now, existing));
  EXPECT_EQ(NewBackupId(now, existing).ToString(), "2026-11-21_04-30.2");
  existing.push_back(NewBackupId(now, existing));
  EXPECT_EQ(NewBackupId(now, existing).ToString(), "2026-11-21_04-30.3");
  // A gap (".2" was deleted) is reused.
  existing = {Id("2026-11-21_04-30"), Id("2026-11-21_04-30.3")};
  EXPECT_EQ(NewBackupId(now, existing).ToString(), "2026-11-21_04-30.2");
}

TEST(BackupIdTest, UtcTimesRoundTripStrictly) {
  EXPECT_EQ(FormatUtcTime(1795235412), "2026-11-21T04:30:12Z");
  auto t = ParseUtcTime("2026-11-21T04:30:12Z");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 1795235412);
  for (const char* bad :
       {"2026-11-21T04:30:12", "2026-11-21 04:30:12Z", "2026-11-21T04:30:60Z",
        "2026-02-30T00:00:00Z", "2026-11-21T04:30:12Z ", "2026-11-21T04:30:12+00:00"})
    EXPECT_FALSE(ParseUtcTime(bad).ok()) << bad;
}

TEST(BackupKeysTest, KeysFollowTheLayout) {
  EXPECT_EQ(CommitKey("2026-11-21_04-30"), "2026-11-21_04-30/strata.backup");
  EXPECT_EQ(PartMetaKey("2026-11-21_04-30", 3), "2026-11-21_04-30/p3.part");
  EXPECT_EQ(PartDataPrefix("2026-11-21_04-30", 3), "2026-11-21_04-30/p3/");
  EXPECT_EQ(PartDataKey("2026-11-21_04-30.2", 0, "400/weights.bin"),
            "2026-11-21_04-30.2/p0/400/weights.bin");
}

TEST(BackupPartMetaTest, RoundTrips) {
  PartMeta m = SamplePart("2026-11-21_04-30.2", 3);
  std::string text = EncodePartMeta(m);
  testing::SaveFuzzSeed("backup", text);
  json doc = json::parse(text);
  EXPECT_EQ(doc["format"], "strata-backup-part");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["digest"], "fedcba9876543210");
  auto back = DecodePartMeta(text, "mem://test/x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, m.id);
  EXPECT_EQ(back->job, m.job);
  EXPECT_EQ(back->part, 3);
  EXPECT_EQ(back->step, 400);
  EXPECT_EQ(back->bytes, 1000u);
  EXPECT_EQ(back->digest, m.digest);
  EXPECT_EQ(back->index, m.index);
}

TEST(BackupCommitTest, RoundTrips) {
  Commit c = SampleCommit("2026-11-21_04-30");
  std::string text = EncodeCommit(c);
  testing::SaveFuzzSeed("backup", text);
  json doc = json::parse(text);
  EXPECT_EQ(doc["format"], "strata-backup");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["created"], "2026-11-21T04:30:12Z");
  EXPECT_EQ(doc["parts"][0]["digest"], "0123456789abcdef");
  auto back = DecodeCommit(text, "mem://test/x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, c.id);
  EXPECT_EQ(back->job, c.job);
  EXPECT_EQ(back->step, c.step);
  EXPECT_EQ(back->nodes, 4);
  EXPECT_EQ(back->workers_per_node, 1);
  EXPECT_EQ(back->data_parallelism, 2);
  EXPECT_EQ(back->created, c.created);
  EXPECT_EQ(back->committed, c.committed);
  EXPECT_EQ(back->sources, c.sources);
  EXPECT_EQ(back->part_bytes, c.part_bytes);
  EXPECT_EQ(back->part_digests, c.part_digests);
  EXPECT_EQ(back->TotalBytes(), 3000u);
  EXPECT_FALSE(back->requested);
  EXPECT_FALSE(doc.contains("requested")) << "older readers see the same document";
}

TEST(BackupCommitTest, ARequestedBackupSaysSo) {
  Commit c = SampleCommit("2026-11-21_04-30");
  c.requested = true;
  std::string text = EncodeCommit(c);
  EXPECT_EQ(json::parse(text)["requested"], true);
  auto back = DecodeCommit(text, "mem://test/x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->requested);
  json doc = json::parse(text);
  doc["requested"] = "yes";
  EXPECT_EQ(DecodeCommit(doc.dump(), "x").status().code(), StatusCode::kDataLoss);
}

// Each mutation of a valid commit document must be rejected as DATA_LOSS
// naming the source.
TEST(BackupCommitTest, RejectsHostileBodies) {
  const json good = json::parse(EncodeCommit(SampleCommit("2026-11-21_04-30")));
  std::vector<std::pair<std::string, std::function<void(json&)>>> cases = {
      {"wrong format", [](json& j) { j["format"] = "strata-backup-part"; }},
      {"no format", [](json& j) { j.erase("format"); }},
      {"version 2", [](json& j) { j["version"] = 2; }},
      {"version string", [](json& j) { j["version"] = "1"; }},
      {"bad id", [](json& j) { j["id"] = "2026-11-21_04-30.01"; }},
      {"id not canonical", [](json& j) { j["id"] = "../../etc"; }},
      {"empty job", [](json& j) { j["job"] = ""; }},
      {"job with newline", [](json& j) { j["job"] = "a\nb"; }},
      {"negative step", [](json& j) { j["step"] = -1; }},
      {"float step", [](json& j) { j["step"] = 1.5; }},
      {"string step", [](json& j) { j["step"] = "400"; }},
      {"huge step", [](json& j) { j["step"] = 18446744073709551615ULL; }},
      {"zero nodes", [](json& j) { j["nodes"] = 0; }},
      {"too many nodes", [](json& j) { j["nodes"] = 1 << 20; }},
      {"zero workers", [](json& j) { j["workers_per_node"] = 0; }},
      {"dp above nodes", [](json& j) { j["data_parallelism"] = 5; }},
      {"bad created", [](json& j) { j["created"] = "yesterday"; }},
      {"committed first", [](json& j) { j["committed"] = "2026-11-21T04:00:00Z"; }},
      {"sources short", [](json& j) { j["sources"].erase(3); }},
      {"sources long", [](json& j) { j["sources"].push_back(0); }},
      {"source to missing part", [](json& j) { j["sources"][2] = 2; }},
      {"negative source", [](json& j) { j["sources"][2] = -1; }},
      {"sources object", [](json& j) { j["sources"] = json::object(); }},
      {"no parts", [](json& j) { j["parts"] = json::array(); }},
      {"duplicate part", [](json& j) { j["parts"][1]["part"] = 0; }},
      {"part beyond nodes", [](json& j) { j["parts"][1]["part"] = 4; }},
      {"negative bytes", [](json& j) { j["parts"][0]["bytes"] = -5; }},
      {"upper-case digest", [](json& j) { j["parts"][0]["digest"] = "0123456789ABCDEF"; }},
      {"short digest", [](json& j) { j["parts"][0]["digest"] = "0123"; }},
      {"numeric digest", [](json& j) { j["parts"][0]["digest"] = 7; }},
      {"not an object",
       [](json& j) {
         j = json::array({1, 2});
       }},
  };
  for (auto& [name, mutate] : cases) {
    json j = good;
    mutate(j);
    auto c = DecodeCommit(j.dump(), "mem://test/2026-11-21_04-30/strata.backup");
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << name;
    EXPECT_NE(c.status().message().find("mem://test/2026-11-21_04-30/strata.backup"),
              std::string::npos)
        << name;
  }
}

// A bad entry of a list is named by its place in the list.
TEST(BackupCommitTest, ABadEntryOfAListIsNamed) {
  const json good = json::parse(EncodeCommit(SampleCommit("2026-11-21_04-30")));
  std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["parts"][1]["digest"] = "0123"; }, "parts[1]: part digest"},
      {[](json& j) { j["parts"][1]["bytes"] = -5; }, "parts[1]: part bytes"},
      {[](json& j) { j["parts"][1]["part"] = 0; }, "parts[1]: parts are not in increasing order"},
      {[](json& j) { j["sources"][2] = "1"; }, "sources[2] is not an integer"},
  };
  for (auto& [mutate, named] : cases) {
    json j = good;
    mutate(j);
    auto c = DecodeCommit(j.dump(), "mem://test/2026-11-21_04-30/strata.backup");
    ASSERT_FALSE(c.ok()) << named;
    EXPECT_NE(c.status().message().find(named), std::string::npos) << c.status().ToString();
  }
}

TEST(BackupCommitTest, RejectsGarbageAndDeepNesting) {
  for (std::string text :
       {std::string(""), std::string("{"), std::string("null"), std::string("\xff\xfe"),
        std::string(100000, '[') + "1" + std::string(100000, ']')}) {
    EXPECT_EQ(DecodeCommit(text, "x").status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(DecodePartMeta(text, "x").status().code(), StatusCode::kDataLoss);
  }
  // Nesting beyond the limit inside an otherwise valid object is rejected,
  // not silently dropped.
  json meta = json::parse(EncodePartMeta(SamplePart("2026-11-21_04-30", 0)));
  json deep = 1;
  for (int i = 0; i < 100; ++i) deep = json::array({deep});
  meta["index"]["deep"] = deep;
  EXPECT_EQ(DecodePartMeta(meta.dump(), "x").status().code(), StatusCode::kDataLoss);
  std::string huge(kMaxCommitBytes + 1, ' ');
  EXPECT_EQ(DecodeCommit(huge, "x").status().code(), StatusCode::kDataLoss);
}

TEST(BackupPartMetaTest, RejectsHostileBodies) {
  const json good = json::parse(EncodePartMeta(SamplePart("2026-11-21_04-30", 1)));
  std::vector<std::pair<std::string, std::function<void(json&)>>> cases = {
      {"commit format", [](json& j) { j["format"] = "strata-backup"; }},
      {"version 0", [](json& j) { j["version"] = 0; }},
      {"no id", [](json& j) { j.erase("id"); }},
      {"negative part", [](json& j) { j["part"] = -1; }},
      {"huge part", [](json& j) { j["part"] = 1 << 20; }},
      {"negative step", [](json& j) { j["step"] = -3; }},
      {"float bytes", [](json& j) { j["bytes"] = 1e3; }},
      {"bad digest", [](json& j) { j["digest"] = "xyz"; }},
      {"index array", [](json& j) { j["index"] = json::array(); }},
      {"no index", [](json& j) { j.erase("index"); }},
  };
  for (auto& [name, mutate] : cases) {
    json j = good;
    mutate(j);
    auto m = DecodePartMeta(j.dump(), "src");
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << name;
    EXPECT_EQ(m.status().message().rfind("src: ", 0), 0u) << m.status().message();
  }
}

TEST(ListBackupsTest, GroupsSummarizesAndSortsById) {
  MemStore store;
  const std::string a = "2026-11-21_04-30", b = "2026-11-21_04-30.10", c = "2026-11-21_04-30.2";
  ASSERT_TRUE(store.Put(PartMetaKey(a, 0), EncodePartMeta(SamplePart(a, 0))).ok());
  ASSERT_TRUE(store.Put(PartMetaKey(a, 1), EncodePartMeta(SamplePart(a, 1))).ok());
  ASSERT_TRUE(store.Put(PartDataKey(a, 0, "400/w.bin"), std::string(100, 'x')).ok());
  ASSERT_TRUE(store.Put(CommitKey(a), EncodeCommit(SampleCommit(a))).ok());
  PartMeta pb = SamplePart(b, 0);
  pb.step = 500;
  ASSERT_TRUE(store.Put(PartMetaKey(b, 0), EncodePartMeta(pb)).ok());       // incomplete
  ASSERT_TRUE(store.Put(CommitKey(c), "{\"format\": \"nonsense\"}").ok());  // corrupt
  ASSERT_TRUE(store.Put(".strata-probe/x", "p").ok());
  ASSERT_TRUE(store.Put("notes/readme", "p").ok());
  ASSERT_TRUE(store.Put("2026-11-21_04-31", "a key, not a directory").ok());

  auto listed = ListBackups(store);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 3u);
  const auto& s = *listed;
  EXPECT_EQ(s[0].id_text, a);
  EXPECT_TRUE(s[0].complete);
  EXPECT_EQ(s[0].step, 400);
  EXPECT_EQ(s[0].objects, 4u);
  ASSERT_TRUE(s[0].commit.has_value());
  EXPECT_EQ(s[0].commit->nodes, 4);
  EXPECT_EQ(s[1].id_text, c);  // ".2" before ".10"
  EXPECT_FALSE(s[1].complete);
  EXPECT_FALSE(s[1].step.has_value());
  EXPECT_NE(s[1].problem.find(CommitKey(c)), std::string::npos) << s[1].problem;
  EXPECT_EQ(s[2].id_text, b);
  EXPECT_FALSE(s[2].complete);
  EXPECT_TRUE(s[2].problem.empty());
  EXPECT_EQ(s[2].step, 500);
}

TEST(ListBackupsTest, ACommitNamingAnotherBackupIsAProblem) {
  MemStore store;
  const std::string a = "2026-11-21_04-30", b = "2026-11-22_04-30";
  ASSERT_TRUE(store.Put(CommitKey(b), EncodeCommit(SampleCommit(a))).ok());
  auto listed = ListBackups(store);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_FALSE((*listed)[0].complete);
  EXPECT_NE((*listed)[0].problem.find("names backup " + a), std::string::npos);
  EXPECT_EQ(ReadCommit(store, b).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ReadCommit(store, a).status().code(), StatusCode::kNotFound);
}

// A store that cannot be read must fail the listing: calling the backup
// incomplete would let prune --delete-incomplete-older-than delete it.
TEST(ListBackupsTest, StoreErrorsAreNotMistakenForIncompleteBackups) {
  MemStore store;
  const std::string a = "2026-11-21_04-30";
  ASSERT_TRUE(store.Put(CommitKey(a), EncodeCommit(SampleCommit(a))).ok());
  store.fail_get.insert(CommitKey(a));
  auto listed = ListBackups(store);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(listed.status().message().find("connection reset"), std::string::npos);
}

TEST(ListBackupsTest, EmptyStoreListsNothing) {
  MemStore store;
  auto listed = ListBackups(store);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

}  // namespace
}  // namespace strata::backup
