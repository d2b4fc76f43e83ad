// Copyright 2026 The Strata Authors.
//
// The backup tier end to end: 4 real agents and trainers on loopback back up
// every few steps into a file:// directory or a real moto_server; the whole
// cluster is lost (every agent killed, every RAM directory wiped) and the
// restart restores from the newest committed backup, ending bit for bit
// where an uninterrupted run ends.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <thread>

#include "backup/layout.h"
#include "cluster.h"
#include "moto.h"
#include "storage/object_store.h"
#include "strata/env.h"
#include "test_util.h"

namespace strata::testing {
namespace {

// Every agent killed, every RAM directory wiped, every agent restarted.
void LoseTheWholeCluster(Cluster& c) {
  for (int n = 0; n < c.nodes(); ++n) c.KillAgent(n);
  for (int n = 0; n < c.nodes(); ++n) c.WipeDir(n);
  c.StartAll();
}

std::vector<backup::BackupSummary> Backups(const std::string& url) {
  auto store = storage::OpenObjectStore(url);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  auto list = backup::ListBackups(**store);
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  return list.ok() ? *list : std::vector<backup::BackupSummary>{};
}

// A fresh file:// backup directory.
struct FileBackup {
  ScratchDir dir{"backup-bucket"};
  std::string url = "file://" + dir.path();
};

// Trainers asking for a backup every `k` steps.
TrainOptions BackupEvery(int k) {
  TrainOptions o;
  o.backup_interval_steps = k;
  return o;
}

TEST(BackupClusterTest, WholeClusterLossRestoresFromTheFileBackup) {
  Cluster c(4, "backup-file");
  FileBackup bucket;
  const std::string url = bucket.url;
  c.SetAgentArgs({"--backup", url});
  c.StartAll();
  TrainOptions o = BackupEvery(4);
  ExpectAll(c.Train(12, 2, o), "fresh", 12);
  const std::string id = c.WaitForBackup(0, 12);
  ASSERT_FALSE(id.empty()) << c.AgentLog(0);
  // Every node learns of it; status shows its age.
  for (int n = 0; n < 4; ++n) {
    auto b = c.Status(n)["backup"];
    EXPECT_EQ(b.value("access", ""), "ok") << b.dump();
    for (int i = 0; i < 100 && !b.contains("newest"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      b = c.Status(n)["backup"];
    }
    EXPECT_TRUE(b.contains("backup_lag_seconds")) << "node " << n << ": " << b.dump();
  }
  auto backups = Backups(url);
  ASSERT_FALSE(backups.empty());
  EXPECT_TRUE(backups.back().complete);
  EXPECT_EQ(backups.back().step, 12);
  // Every K = 4 steps: at most one backup per multiple of 4.
  for (size_t i = 1; i < backups.size(); ++i) {
    EXPECT_GT(*backups[i].step / 4, *backups[i - 1].step / 4) << backups[i].id_text;
  }
  auto store = storage::OpenObjectStore(url);
  ASSERT_TRUE(store.ok());
  std::map<std::string, std::string> before;  // every object of the backup, with its bytes
  for (const auto& obj : (*store)->List(id + "/").value_or({})) {
    before[obj.key] = (*store)->Get(obj.key).value_or("?");
  }
  ASSERT_FALSE(before.empty());

  LoseTheWholeCluster(c);
  ExpectAll(c.Train(20, 2, o), "12", 20);
  for (int n = 0; n < 4; ++n) {
    EXPECT_NE(c.Status(n)["last_restore"].get<std::string>().find("from backup " + id),
              std::string::npos)
        << c.Status(n).dump(2);
  }
  // The agents never modify or delete a backup: the restored one is intact,
  // byte for byte.
  std::map<std::string, std::string> after;
  for (const auto& obj : (*store)->List(id + "/").value_or({})) {
    after[obj.key] = (*store)->Get(obj.key).value_or("?");
  }
  EXPECT_TRUE(after == before);
}

TEST(BackupClusterTest, ABackupInterruptedBeforeItsCommitIsNeverUsed) {
  Cluster c(4, "backup-crash");
  FileBackup bucket;
  const std::string url = bucket.url;
  c.SetAgentArgs({"--backup", url});
  c.StartAll();
  TrainOptions o = BackupEvery(4);
  ExpectAll(c.Train(4, 2, o), "fresh", 4);
  ASSERT_FALSE(c.WaitForBackup(0, 4).empty()) << c.AgentLog(0);

  // The coordinator dies after every part of the next backup is uploaded,
  // just before it would write the commit object.
  c.KillAgent(0);
  c.SetAgentEnv(0, {"STRATA_CRASH_AT=coordinator_before_commit"});
  c.StartAgent(0);
  o.wait_replicated = false;
  ExpectAll(c.Train(8, 2, o), "4", 8);
  EXPECT_EQ(c.WaitAgentExit(0, std::chrono::seconds(60)), 128 + 9) << c.AgentLog(0);
  auto backups = Backups(url);
  ASSERT_EQ(backups.size(), 2u);
  EXPECT_TRUE(backups[0].complete);
  EXPECT_FALSE(backups[1].complete) << "the interrupted backup must stay incomplete";
  EXPECT_EQ(backups[1].step, 8);

  c.SetAgentEnv(0, {});
  for (int n = 1; n < 4; ++n) c.KillAgent(n);
  for (int n = 0; n < 4; ++n) c.WipeDir(n);
  c.StartAll();
  o.wait_replicated = true;
  ExpectAll(c.Train(12, 2, o), "4", 12);  // the previous, committed backup
  // The client is told which backup it restores from.
  EXPECT_EQ(ReadFile(c.dir(2) + "/replicator.prerestore"),
            "restore-step: 4\nrestore-backup: " + backups[0].id_text + "\n");
  EXPECT_NE(c.AgentLog(2).find("from backup " + backups[0].id_text), std::string::npos)
      << c.AgentLog(2);
}

// --restore-backup ID on the coordinating agent: the job's next start
// restores that backup's step although the cluster holds newer ones; an id
// that is not a complete backup fails the start with a message the client
// reads; later starts behave as usual.
TEST(BackupClusterTest, AnOperatorCanRestoreASpecificBackup) {
  Cluster c(2, "backup-pick");
  FileBackup bucket;
  const std::string url = bucket.url;
  c.SetAgentArgs({"--backup", url});
  c.StartAll();
  TrainOptions o = BackupEvery(4);
  auto runs = c.Train(8, 2, o);
  const std::string id_of_8 = c.WaitForBackup(0, 8);
  ASSERT_FALSE(id_of_8.empty()) << c.AgentLog(0);
  runs = c.Train(12, 2, o);
  ASSERT_FALSE(c.WaitForBackup(0, 12).empty()) << c.AgentLog(0);

  c.KillAgent(0);
  c.SetAgentArgs({"--backup", url, "--restore-backup", "2001-01-01_00-00"});
  c.StartAgent(0);
  o.wait_replicated = false;
  runs = c.Train(16, 2, o);
  for (int n = 0; n < 2; ++n) {
    EXPECT_NE(runs[n].exit_code, 0);
    EXPECT_NE(runs[n].err.find("2001-01-01_00-00"), std::string::npos) << runs[n].err;
  }

  c.KillAgent(0);
  c.SetAgentArgs({"--backup", url, "--restore-backup", id_of_8});
  c.StartAgent(0);
  o.wait_replicated = true;
  runs = c.Train(10, 2, o);
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(runs[n].restored, "8") << runs[n].out << runs[n].err;
    EXPECT_EQ(runs[n].digest, Cluster::ReferenceDigest(n, 10));
    // Step 12 of the abandoned run is gone from every store.
    const auto status = c.Status(n);
    for (const auto& held : status["steps"]) EXPECT_LE(held["step"].get<int64_t>(), 10);
  }
  // The backup of step 12 predates the rollback: even with every in-cluster
  // copy lost, it is not restored; the rolled-back-to backup is.
  c.SetAgentArgs({"--backup", url});
  LoseTheWholeCluster(c);
  runs = c.Train(14, 2, o);
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(runs[n].restored, "8") << runs[n].out;
    EXPECT_EQ(runs[n].digest, Cluster::ReferenceDigest(n, 14));
  }
}

// Only node 1 keeps its RAM disk: it restores from its own store and serves
// node 3's copy; the nodes whose every in-cluster copy is gone download
// their part from the backup, and only they are told so in
// replicator.prerestore.
TEST(BackupClusterTest, NodesThatStillHoldTheStepDoNotDownloadIt) {
  Cluster c(4, "backup-partial");
  FileBackup bucket;
  c.SetAgentArgs({"--backup", bucket.url});
  c.StartAll();
  TrainOptions o = BackupEvery(4);
  ExpectAll(c.Train(8, 2, o), "fresh", 8);
  const std::string id = c.WaitForBackup(0, 8);
  ASSERT_FALSE(id.empty());
  for (int n = 0; n < 4; ++n) c.KillAgent(n);
  for (int n : {0, 2, 3}) c.WipeDir(n);
  c.StartAll();
  ExpectAll(c.Train(10, 2, o), "8", 10);
  auto restored = [&](int n) { return c.Status(n)["last_restore"].get<std::string>(); };
  EXPECT_NE(restored(1).find("own store"), std::string::npos) << restored(1);
  EXPECT_NE(restored(3).find("from node 1"), std::string::npos) << restored(3);
  EXPECT_NE(restored(0).find("from backup " + id), std::string::npos) << restored(0);
  EXPECT_NE(restored(2).find("from backup " + id), std::string::npos) << restored(2);
  EXPECT_EQ(ReadFile(c.dir(1) + "/replicator.prerestore"), "restore-step: 8\n");
  EXPECT_EQ(ReadFile(c.dir(0) + "/replicator.prerestore"),
            "restore-step: 8\nrestore-backup: " + id + "\n");
}

// The same against a real S3 server (moto). moto checks signatures and
// policies, but its SigV4 check does not percent-encode query values, so it
// refuses any correctly signed ListObjectsV2 whose prefix holds a '/' (the
// aws CLI's too). The data-path tests therefore run with authentication
// off; the refusal tests run with it on (and storage_tests check signing
// of every other request with it on).
class S3BackupClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    moto_ = new MotoServer();
    Status s = moto_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static void TearDownTestSuite() {
    delete moto_;
    moto_ = nullptr;
  }
  // Points every agent of `c` at moto with `creds` (default: the allowed user).
  static void UseMoto(Cluster& c, const std::string& url, const S3Credentials* creds = nullptr) {
    std::vector<std::string> env = moto_->AwsEnv();
    if (creds != nullptr) {
      env.push_back("AWS_ACCESS_KEY_ID=" + creds->access_key_id);
      env.push_back("AWS_SECRET_ACCESS_KEY=" + creds->secret_access_key);
    }
    for (int n = 0; n < c.nodes(); ++n) c.SetAgentEnv(n, env);
    c.SetAgentArgs({"--backup", url});
  }
  // Runs the aws CLI with `args` as user strata, signatures checked: the
  // locked moto checks the request line as it arrived, so the CLI's
  // standard signatures (a listing below a prefix included) are accepted,
  // as Strata's are (docs/backup.md, "Signing").
  static int AwsCli(std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), MotoServer::FindTool("aws"));
    return strata::testing::Run(args, out, moto_->AwsEnv());
  }
  // `aws s3 ls --recursive`: the keys below `url`, as the standard tool sees them.
  static std::vector<std::string> AwsList(const std::string& url) {
    std::string out;
    EXPECT_EQ(AwsCli({"s3", "ls", "--recursive", url + "/"}, &out), 0) << out;
    std::vector<std::string> keys;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      auto at = line.find_last_of(' ');  // "date time size key"
      if (at != std::string::npos) keys.push_back(line.substr(at + 1));
    }
    return keys;
  }
  static MotoServer* moto_;
};
MotoServer* S3BackupClusterTest::moto_ = nullptr;

// 4 nodes in 2 data-parallel replicas, backing up below a prefix of two
// levels with every signature checked: each column is uploaded once, and
// after the whole cluster is lost every node restores from its column.
TEST_F(S3BackupClusterTest, WholeClusterLossRestoresFromS3WithDataParallelism) {
  ASSERT_TRUE(moto_->CreateBucket("ckpt-dp").ok());
  Cluster c(4, "backup-s3");
  UseMoto(c, "s3://ckpt-dp/some/prefix");
  c.StartAll();
  TrainOptions o = BackupEvery(4);
  o.data_parallelism = 2;
  o.seed = [](int node) { return 100 + node % 2; };
  auto expect = [&](const std::vector<TrainerRun>& runs, const std::string& restored,
                    int64_t steps) {
    for (int n = 0; n < 4; ++n) {
      EXPECT_EQ(runs[n].exit_code, 0) << runs[n].err;
      EXPECT_EQ(runs[n].restored, restored) << "node " << n << ": " << runs[n].out;
      EXPECT_EQ(runs[n].digest, Cluster::ReferenceDigestForSeed(100 + n % 2, steps, 2));
    }
  };
  expect(c.Train(8, 2, o), "fresh", 8);
  const std::string id = c.WaitForBackup(0, 8);
  ASSERT_FALSE(id.empty()) << c.AgentLog(0);

  // What the standard tool sees is exactly what Strata wrote: the commit
  // object and parts 0 and 1 only.
  auto store = storage::OpenObjectStore("s3://ckpt-dp/some/prefix", [] {
    storage::StoreOptions so;
    so.endpoint = moto_->endpoint();
    so.access_key_id = moto_->strata().access_key_id;
    so.secret_access_key = moto_->strata().secret_access_key;
    return so;
  }());
  ASSERT_TRUE(store.ok());
  auto ours = (*store)->List("");
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  std::vector<std::string> keys;
  for (const auto& o2 : *ours) keys.push_back("some/prefix/" + o2.key);
  EXPECT_EQ(AwsList("s3://ckpt-dp/some/prefix"), keys);
  bool commit = false;
  for (const auto& k : keys) {
    commit |= k.ends_with("/strata.backup");
    EXPECT_TRUE(k.find("/p2") == std::string::npos && k.find("/p3") == std::string::npos)
        << k << ": a second replica uploaded its copy of a column";
  }
  EXPECT_TRUE(commit);

  LoseTheWholeCluster(c);
  expect(c.Train(12, 2, o), "8", 12);
  if (std::getenv("STRATA_TEST_LOGS")) std::cerr << c.AgentLog(0) << c.AgentLog(3);
  EXPECT_NE(c.Status(3)["last_restore"].get<std::string>().find("from backup " + id),
            std::string::npos)
      << c.Status(3).dump(2);
}

// A bucket that does not exist, and credentials without permissions: one
// readable line in the log and in status; training carries on in-cluster.
TEST_F(S3BackupClusterTest, AnUnusableBucketIsReportedAndTrainingCarriesOn) {
  ASSERT_TRUE(moto_->CreateBucket("ckpt-denied").ok());
  struct Case {
    std::string url;
    const S3Credentials* creds;
    std::vector<std::string> says;
  };
  for (const Case& k :
       {Case{"s3://no-such-bucket/job", nullptr, {"no-such-bucket", "does not exist"}},
        Case{"s3://ckpt-denied/job", &moto_->nobody(), {"ckpt-denied", "s3:"}}}) {
    Cluster c(2, "backup-bad");
    UseMoto(c, k.url, k.creds);
    c.StartAll();
    TrainOptions o;
    o.backup_interval_steps = 2;
    auto runs = c.Train(6, 2, o);
    for (int n = 0; n < 2; ++n) {
      EXPECT_EQ(runs[n].exit_code, 0) << runs[n].err;
      EXPECT_EQ(runs[n].digest, Cluster::ReferenceDigest(n, 6));
    }
    // The check runs on the upload thread, at idle priority: on a busy
    // machine it may come after the training.
    std::string access;
    WaitUntil(
        [&] {
          access = c.Status(1)["backup"].value("access", "");
          return access != "not checked yet";
        },
        std::chrono::seconds(60));
    for (const auto& word : k.says) {
      EXPECT_NE(access.find(word), std::string::npos) << k.url << ": " << access;
      EXPECT_NE(c.AgentLog(1).find(word), std::string::npos) << c.AgentLog(1);
    }
    EXPECT_EQ(access.find('\n'), std::string::npos) << "one line: " << access;
    // The job's backups fail too, and every node's status says why.
    std::string job_error;
    for (int i = 0; i < 100 && job_error.empty(); ++i) {
      job_error = c.Status(1)["backup"].value("job_error", "");
      if (job_error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_NE(job_error.find(k.says[0]), std::string::npos) << job_error << c.AgentLog(0);
    // The in-cluster tiers still restore.
    runs = c.Train(8, 2, o);
    for (int n = 0; n < 2; ++n) EXPECT_EQ(runs[n].restored, "6") << runs[n].out;
  }
}

// A file:// backup copied to S3 with the standard tool restores from there.
TEST_F(S3BackupClusterTest, AFileBackupSyncedToS3RestoresFromThere) {
  ASSERT_TRUE(moto_->CreateBucket("ckpt-sync").ok());
  FileBackup bucket;
  Cluster c(2, "backup-sync");
  c.SetAgentArgs({"--backup", bucket.url});
  c.StartAll();
  TrainOptions o = BackupEvery(4);
  auto runs = c.Train(8, 2, o);
  const std::string id = c.WaitForBackup(0, 8);
  ASSERT_FALSE(id.empty()) << c.AgentLog(0);
  std::string out;
  ASSERT_EQ(AwsCli({"s3", "sync", bucket.dir.path(), "s3://ckpt-sync/copy"}, &out), 0) << out;

  for (int n = 0; n < 2; ++n) c.KillAgent(n);
  for (int n = 0; n < 2; ++n) c.WipeDir(n);
  UseMoto(c, "s3://ckpt-sync/copy");
  c.StartAll();
  runs = c.Train(10, 2, o);
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(runs[n].restored, "8") << runs[n].out;
    EXPECT_EQ(runs[n].digest, Cluster::ReferenceDigest(n, 10));
  }
  EXPECT_NE(c.Status(1)["last_restore"].get<std::string>().find("from backup " + id),
            std::string::npos);
}

// The retention tool on S3: `backups ls` and `prune --delete` through the
// S3 API, checked with the standard tool.
TEST_F(S3BackupClusterTest, PruneOnS3DeletesExactlyWhatTheDryRunListed) {
  ASSERT_TRUE(moto_->CreateBucket("ckpt-prune").ok());
  Cluster c(2, "backup-prune");
  UseMoto(c, "s3://ckpt-prune/job");
  c.StartAll();
  TrainOptions o = BackupEvery(2);
  c.Train(8, 2, o);
  ASSERT_FALSE(c.WaitForBackup(0, 8).empty()) << c.AgentLog(0);
  const std::string url = "s3://ckpt-prune/job";
  auto strata = [&](std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), BinaryPath("strata"));
    return strata::testing::Run(args, out, moto_->AwsEnv());
  };
  std::string out;
  ASSERT_EQ(strata({"backups", "ls", url, "--json"}, &out), 0) << out;
  auto listed = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(listed.is_array() && listed.size() >= 2) << out;

  // --hourly 1 keeps the first backup of the newest hour and the newest
  // backup (the same hour unless the test crossed one). A backup abandoned
  // on the way (a part's upload failed on a loaded machine) is incomplete,
  // and prune always keeps those: they are counted apart.
  ASSERT_EQ(strata({"prune", url, "--hourly", "1", "--json"}, &out), 0) << out;
  auto dry = nlohmann::json::parse(out, nullptr, false);
  std::set<std::string> keep, drop, incomplete;
  for (const auto& b : dry["backups"]) {
    (b["keep"].get<bool>() ? keep : drop).insert(b["id"]);
    if (b["reason"] == "incomplete") incomplete.insert(b["id"]);
  }
  EXPECT_EQ(keep.size() + drop.size(), listed.size());
  for (const auto& id : incomplete) EXPECT_TRUE(keep.count(id)) << id << " " << out;
  EXPECT_GE(keep.size() - incomplete.size(), 1u);
  EXPECT_LE(keep.size() - incomplete.size(), 2u) << out;
  const auto before = AwsList(url);
  ASSERT_EQ(strata({"prune", url, "--hourly", "1", "--delete"}, &out), 0) << out;
  std::vector<std::string> want;
  for (const auto& k : before) {
    if (!drop.count(k.substr(4, k.find('/', 4) - 4))) want.push_back(k);  // "job/<id>/..."
  }
  EXPECT_EQ(AwsList(url), want);
}

}  // namespace
}  // namespace strata::testing
