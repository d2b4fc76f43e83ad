// Copyright 2026 The Strata Authors.
//
// strata backups ls and strata prune, in-process, on real file:// stores.
#include <gtest/gtest.h>

#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "backup/layout.h"
#include "cli/cli.h"
#include "cli_runner.h"
#include "storage/object_store.h"
#include "test_util.h"

namespace strata::cli {
namespace {

using json = nlohmann::json;
using testing::ScratchDir;

class BackupCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = storage::OpenObjectStore(url_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }

  // A backup of `step` over two nodes: part metadata and one data object per
  // part, and the commit object when `complete`.
  void MakeBackup(const std::string& id, int64_t step, bool complete = true,
                  bool requested = false) {
    backup::Commit commit;
    commit.requested = requested;
    commit.id = id;
    commit.job = "llama";
    commit.step = step;
    commit.nodes = 2;
    commit.created = backup::ParseBackupId(id)->minute;
    commit.committed = commit.created + 60;
    for (int part = 0; part < 2; ++part) {
      std::string data(1000 * (part + 1), 'x');
      ASSERT_TRUE(store_->Put(backup::PartDataKey(id, part, "w.bin"), data).ok());
      backup::PartMeta meta{id, "llama", part, step, json::object(), data.size(), 7};
      ASSERT_TRUE(store_->Put(backup::PartMetaKey(id, part), backup::EncodePartMeta(meta)).ok());
      commit.sources[part] = part;
      commit.part_bytes[part] = data.size();
      commit.part_digests[part] = 7;
    }
    if (complete) {
      ASSERT_TRUE(store_->Put(backup::CommitKey(id), backup::EncodeCommit(commit)).ok());
    }
  }

  // Every object in the store with its size.
  std::map<std::string, uint64_t> Objects() {
    auto listed = store_->List("");
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    std::map<std::string, uint64_t> out;
    for (const auto& o : listed.value_or({})) out[o.key] = o.size;
    return out;
  }

  // The ids prune printed with `verb` ("keep" or "delete").
  static std::set<std::string> Printed(const std::string& out, const std::string& verb) {
    std::set<std::string> ids;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream words(line);
      std::string first, id;
      if (words >> first >> id && first == verb) ids.insert(id);
    }
    return ids;
  }

  ScratchDir dir_;
  std::string url_ = "file://" + dir_.path() + "/bucket";
  std::unique_ptr<storage::ObjectStore> store_;
};

TEST_F(BackupCliTest, LsShowsCompleteIncompleteAndCorruptBackups) {
  MakeBackup("2026-11-20_04-30", 300);
  MakeBackup("2026-11-21_04-30", 400, /*complete=*/false);
  MakeBackup("2026-11-21_04-30.2", 410);
  ASSERT_TRUE(store_->Put(backup::CommitKey("2026-11-21_04-30.2"), "{\"format\": 1}").ok());
  ASSERT_TRUE(store_->Put(".strata-probe/p", "x").ok());

  auto r = Cli({"backups", "ls", url_});
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string header, l1, l2, l3, extra;
  std::getline(lines, header);
  std::getline(lines, l1);
  std::getline(lines, l2);
  std::getline(lines, l3);
  EXPECT_FALSE(std::getline(lines, extra)) << r.out;
  EXPECT_NE(header.find("OBJECTS"), std::string::npos);
  EXPECT_EQ(l1.rfind("2026-11-20_04-30 ", 0), 0u) << r.out;
  EXPECT_NE(l1.find(" 300 "), std::string::npos) << l1;
  uint64_t bytes = 0;
  for (const auto& [key, size] : Objects())
    if (key.starts_with("2026-11-20_04-30/")) bytes += size;
  EXPECT_NE(l1.find(HumanBytes(bytes)), std::string::npos) << l1;
  EXPECT_NE(l1.find("  complete"), std::string::npos) << l1;
  EXPECT_NE(l2.find("incomplete"), std::string::npos) << l2;
  EXPECT_NE(l2.find(" 400 "), std::string::npos) << l2;
  EXPECT_NE(l3.find("incomplete (" + url_ + "/2026-11-21_04-30.2/strata.backup: "),
            std::string::npos)
      << l3;

  r = Cli({"backups", "ls", url_, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["id"], "2026-11-20_04-30");
  EXPECT_EQ(j[0]["complete"], true);
  EXPECT_EQ(j[0]["step"], 300);
  EXPECT_EQ(j[0]["objects"], 5);
  EXPECT_EQ(j[0]["job"], "llama");
  EXPECT_EQ(j[0]["created"], "2026-11-20T04:30:00Z");
  EXPECT_EQ(j[1]["complete"], false);
  EXPECT_EQ(j[1]["step"], 400);
  EXPECT_FALSE(j[1].contains("problem"));
  EXPECT_EQ(j[2]["complete"], false);
  EXPECT_TRUE(j[2].contains("problem"));
}

TEST_F(BackupCliTest, LsOfAnEmptyStorePrintsOnlyTheHeader) {
  auto r = Cli({"backups", "ls", url_});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  r = Cli({"backups", "ls", url_, "--json"});
  EXPECT_EQ(json::parse(r.out), json::array());
}

TEST_F(BackupCliTest, DryRunPrintsDecisionsAndDeletesNothing) {
  // Two days of 6-hourly backups, one incomplete.
  for (const char* id : {"2026-11-19_00-00", "2026-11-19_06-00", "2026-11-19_12-00",
                         "2026-11-19_18-00", "2026-11-20_00-00", "2026-11-20_06-00"})
    MakeBackup(id, 100);
  MakeBackup("2026-11-20_12-00", 200, /*complete=*/false);
  const auto before = Objects();

  auto r = Cli({"prune", url_, "--daily", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("keep   2026-11-19_00-00     step 100        (daily 2026-11-19)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("keep   2026-11-20_06-00     step 100        (newest)\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("delete 2026-11-19_06-00     step 100        (not kept by any class)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("keep   2026-11-20_12-00     step 200        (incomplete)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(Printed(r.out, "keep"),
            (std::set<std::string>{"2026-11-19_00-00", "2026-11-20_00-00", "2026-11-20_06-00",
                                   "2026-11-20_12-00"}));
  EXPECT_EQ(Printed(r.out, "delete").size(), 3u);
  EXPECT_NE(r.out.find("dry run: would keep 4, delete 3 backups"), std::string::npos) << r.out;
  EXPECT_EQ(Objects(), before);
}

// A backup a client requested (_BACKUP_REQUESTED) shows so, and no
// retention class deletes it.
TEST_F(BackupCliTest, RequestedBackupsAreShownAndNeverPruned) {
  MakeBackup("2026-11-19_00-00", 100);
  MakeBackup("2026-11-19_06-00", 150, /*complete=*/true, /*requested=*/true);
  MakeBackup("2026-11-19_12-00", 200);
  MakeBackup("2026-11-20_00-00", 300);
  auto r = Cli({"backups", "ls", url_});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2026-11-19_06-00             150"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("complete, requested\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("requested", r.out.find("2026-11-19_12-00")), std::string::npos) << r.out;
  r = Cli({"backups", "ls", url_, "--json"});
  json j = json::parse(r.out);
  EXPECT_EQ(j[1]["requested"], true);
  EXPECT_EQ(j[2]["requested"], false);

  r = Cli({"prune", url_, "--daily", "1", "--delete"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("keep   2026-11-19_06-00     step 150        (requested)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(Printed(r.out, "delete"),
            (std::set<std::string>{"2026-11-19_00-00", "2026-11-19_12-00"}));
  EXPECT_TRUE(Objects().count("2026-11-19_06-00/strata.backup"));
}

TEST_F(BackupCliTest, DeleteRemovesExactlyWhatTheDryRunListed) {
  for (int day = 1; day <= 9; ++day) {
    char id[32];
    std::snprintf(id, sizeof id, "2026-11-%02d_04-30", day);
    MakeBackup(id, day * 100);
    std::snprintf(id, sizeof id, "2026-11-%02d_16-30", day);
    MakeBackup(id, day * 100 + 50);
  }
  MakeBackup("2020-01-01_00-00", 1, /*complete=*/false);  // long abandoned
  ASSERT_TRUE(store_->Put(".strata-probe/p", "x").ok());
  const auto before = Objects();
  const std::vector<std::string> flags = {"prune",     url_,       "--daily",
                                          "3",         "--weekly", "2",
                                          "--monthly", "always",   "--delete-incomplete-older-than",
                                          "7d"};
  auto dry = Cli(flags);
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_EQ(Objects(), before);
  const auto to_delete = Printed(dry.out, "delete");
  const auto to_keep = Printed(dry.out, "keep");
  EXPECT_TRUE(to_delete.count("2020-01-01_00-00")) << dry.out;
  EXPECT_NE(dry.out.find("(incomplete, older than 7d)"), std::string::npos) << dry.out;
  EXPECT_EQ(to_delete.size() + to_keep.size(), 19u);

  auto args = flags;
  args.push_back("--delete");
  auto r = Cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Printed(r.out, "delete"), to_delete);
  EXPECT_NE(r.out.find("deleted " + std::to_string(to_delete.size()) + " backups"),
            std::string::npos)
      << r.out;
  std::map<std::string, uint64_t> want;
  for (const auto& [key, size] : before)
    if (!to_delete.count(key.substr(0, key.find('/')))) want[key] = size;
  EXPECT_EQ(Objects(), want);

  // Nothing is left to delete.
  r = Cli(flags);
  EXPECT_TRUE(Printed(r.out, "delete").empty()) << r.out;
  EXPECT_EQ(Printed(r.out, "keep"), to_keep);
}

TEST_F(BackupCliTest, PruneJsonListsDecisions) {
  MakeBackup("2026-11-19_00-00", 100);
  MakeBackup("2026-11-19_06-00", 200);
  auto r = Cli({"prune", url_, "--yearly", "1", "--prefer-recent", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["delete"], false);
  ASSERT_EQ(j["backups"].size(), 2u);
  EXPECT_EQ(j["backups"][0]["keep"], false);
  EXPECT_EQ(j["backups"][1]["reason"], "yearly 2026, newest");
  EXPECT_EQ(j["backups"][1]["step"], 200);
  r = Cli({"prune", url_, "--yearly", "1", "--prefer-recent", "--json", "--delete"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["backups"][0]["deleted"], true);
  EXPECT_FALSE(j["backups"][1].contains("deleted"));
  auto objects = Objects();
  ASSERT_FALSE(objects.empty());
  EXPECT_EQ(objects.begin()->first.rfind("2026-11-19_06-00/", 0), 0u);
}

TEST_F(BackupCliTest, BadRetentionFlagsAreUsageErrors) {
  MakeBackup("2026-11-19_00-00", 100);
  MakeBackup("2026-11-19_06-00", 200);
  const auto before = Objects();
  auto r = Cli({"prune", url_, "--delete"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "strata prune: no retention class given\n");
  for (std::vector<std::string> bad : {std::vector<std::string>{"--daily", "0"},
                                       {"--daily", "always"},
                                       {"--weekly", "-1"},
                                       {"--hourly", "3x"},
                                       {"--monthly", "sometimes"},
                                       {"--yearly", ""},
                                       {"--daily", "1", "--delete-incomplete-older-than", "7"}}) {
    std::vector<std::string> args = {"prune", url_, "--delete"};
    args.insert(args.end(), bad.begin(), bad.end());
    r = Cli(args);
    EXPECT_EQ(r.code, 2) << bad[0] << " " << bad[1] << ": " << r.err;
  }
  EXPECT_EQ(Cli({"prune", "--daily", "1"}).code, 2);  // no URL
  r = Cli({"prune", "http://x/y", "--daily", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("http://x/y"), std::string::npos);
  EXPECT_EQ(Objects(), before);
}

TEST_F(BackupCliTest, AnUnusableStoreIsAnErrorOnOneLine) {
  testing::WriteFile(dir_.Sub("file"), "not a directory");
  for (const char* command : {"ls", "prune"}) {
    std::vector<std::string> args = {"backups", "ls", "file://" + dir_.Sub("file") + "/sub"};
    if (std::string(command) == "prune")
      args = {"prune", "file://" + dir_.Sub("file") + "/sub", "--daily", "1"};
    auto r = Cli(args);
    EXPECT_EQ(r.code, 1) << command << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(dir_.Sub("file")), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace strata::cli
