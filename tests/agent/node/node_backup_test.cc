// Copyright 2026 The Strata Authors.
//
// NodeBackup, the node's part in backups, as a component in one process: a
// real store, a real file:// backup, the coordinator's side played by the
// test through the component's hooks.
#include "agent/node/node_backup.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <vector>

#include "backup/layout.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class NodeBackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(local_.path(), &pool_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    const std::string client = local_.Sub("client");
    fs::create_directories(client + "/sub");
    testing::WriteFile(client + "/a.bin", std::string(5000, 'a'));
    testing::WriteFile(client + "/sub/b.bin", std::string(300, 'b'));
    auto index = store_->Ingest(client, key_);
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = *index;
    job_.job_name = "job1";
    job_.node_rank = 1;
    job_.nodes = 2;
    AgentConfig config;
    config.backup_url = "file://" + bucket_.path();
    NodeBackup::Hooks hooks;
    hooks.current_job = [this] { return std::optional<ReplicatorConfig>(job_); };
    hooks.call_coordinator = [this](const ReplicatorConfig&, const json& request,
                                    std::chrono::milliseconds) -> StatusOr<json> {
      std::lock_guard<std::mutex> l(mu_);
      reports_.push_back(request);
      cv_.notify_all();
      if (refuse_reports_) return UnavailableError("the coordinator is away");
      return json{{"ok", true}};
    };
    hooks.yield_to_ondemand = [] {};
    hooks.stopping = [] { return false; };
    auto backup = NodeBackup::Open(config, store_.get(), Env::Default(), std::move(hooks));
    ASSERT_TRUE(backup.ok()) << backup.status().ToString();
    backup_ = std::move(*backup);
    backup_->Start();
  }

  // The upload thread calls the hooks, which use the members below.
  void TearDown() override { backup_.reset(); }

  // Waits until `n` reports reached the coordinator; returns the n-th.
  json Report(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    EXPECT_TRUE(cv_.wait_for(l, 30s, [&] { return reports_.size() >= n; }))
        << reports_.size() << " report(s)";
    return reports_.size() >= n ? reports_[n - 1] : json();
  }

  BackupNews Task(const std::string& id) {
    BackupNews news;
    news.task = BackupTask{id, key_};
    return news;
  }

  testing::ScratchDir local_{"nodebackup"};
  testing::ScratchDir bucket_{"nodebackup-bucket"};
  ThreadPool pool_{1};
  std::unique_ptr<Store> store_;
  const wire::StepKey key_{"job1", 1, 40};
  StepIndex index_;
  ReplicatorConfig job_;
  std::unique_ptr<NodeBackup> backup_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<json> reports_;    // guarded by mu_
  bool refuse_reports_ = false;  // guarded by mu_
};

// A task uploads the part (files, then its metadata), reports it with its
// bytes and digest, and pins the step until the report is heard.
TEST_F(NodeBackupTest, ATaskIsUploadedReportedAndPinnedUntilHeard) {
  {
    std::lock_guard<std::mutex> l(mu_);
    refuse_reports_ = true;  // the first report is not heard
  }
  backup_->OnNews(Task("2026-11-24_10-01"));
  EXPECT_EQ(backup_->Pins(), std::set<wire::StepKey>{key_});
  json first = Report(1);
  EXPECT_EQ(first.value("op", ""), "backup_done");
  EXPECT_EQ(first.value("ok", false), true) << first.dump();
  EXPECT_EQ(first.value("bytes", uint64_t{0}), index_.total_bytes);
  EXPECT_EQ(first.value("part", -1), 1);
  EXPECT_EQ(first.value("step", int64_t{-1}), 40);
  EXPECT_FALSE(first.contains("step_gone")) << first.dump();
  EXPECT_EQ(backup_->Pins(), std::set<wire::StepKey>{key_}) << "an unheard report keeps the pin";
  EXPECT_TRUE(fs::exists(bucket_.path() + "/" + backup::PartMetaKey("2026-11-24_10-01", 1)));
  EXPECT_EQ(testing::ReadFile(bucket_.path() + "/" +
                              backup::PartDataKey("2026-11-24_10-01", 1, "sub/b.bin")),
            std::string(300, 'b'));
  {
    std::lock_guard<std::mutex> l(mu_);
    refuse_reports_ = false;
  }
  // The coordinator asks again: the part is reported again, not re-uploaded.
  backup_->OnNews(Task("2026-11-24_10-01"));
  json second = Report(2);
  EXPECT_EQ(second.value("id", ""), "2026-11-24_10-01");
  // Heard: with no task any more, nothing stays pinned.
  for (int i = 0; i < 100 && !backup_->Pins().empty(); ++i) {
    backup_->OnNews(BackupNews());
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(backup_->Pins().empty());
  wire::BackupStatus status = backup_->StatusReport();
  EXPECT_EQ(status.access, "ok") << status.ToJson().dump();
  EXPECT_FALSE(status.last_error) << *status.last_error;
}

// A part restores into another store, verified against the part's index; a
// part of another copy than the plan's is refused.
TEST_F(NodeBackupTest, APartRestoresVerifiedAndAForeignOneIsRefused) {
  backup_->OnNews(Task("2026-11-24_10-02"));
  ASSERT_EQ(Report(1).value("ok", false), true);
  ASSERT_TRUE(store_->Remove(key_).ok());
  Status wrong = backup_->FetchPart("2026-11-24_10-02", key_, index_.digest + 1);
  EXPECT_EQ(wrong.code(), StatusCode::kDataLoss) << wrong.ToString();
  EXPECT_FALSE(store_->Has(key_));
  Status got = backup_->FetchPart("2026-11-24_10-02", key_, index_.digest);
  ASSERT_TRUE(got.ok()) << got.ToString();
  EXPECT_TRUE(store_->Verify(key_).ok());
  EXPECT_EQ(testing::ReadFile(store_->StepPath(key_) + "/a.bin"), std::string(5000, 'a'));
}

// A task whose step the node does not hold fails, is reported as failed
// with step_gone (the coordinator then takes a newer step at once), and the
// failure shows in the status.
TEST_F(NodeBackupTest, AFailedUploadIsReportedAsFailed) {
  BackupNews news;
  news.task = BackupTask{"2026-11-24_10-03", {"job1", 1, 99}};
  backup_->OnNews(news);
  json report = Report(1);
  EXPECT_EQ(report.value("ok", true), false) << report.dump();
  EXPECT_EQ(report.value("step_gone", false), true) << report.dump();
  EXPECT_NE(report.value("error", "").find("job1/1/99"), std::string::npos) << report.dump();
  EXPECT_TRUE(backup_->StatusReport().last_error.has_value());
}

// A held step that cannot be uploaded (the store is broken: its directory
// is a file now) is the store's failure, not a gone step.
TEST_F(NodeBackupTest, AStoreFailureIsNotAGoneStep) {
  fs::remove_all(bucket_.path());
  testing::WriteFile(bucket_.path(), "not a directory");
  backup_->OnNews(Task("2026-11-24_10-04"));
  json report = Report(1);
  EXPECT_EQ(report.value("ok", true), false) << report.dump();
  EXPECT_FALSE(report.contains("step_gone")) << report.dump();
}

TEST(BackupNewsTest, ATaskOutsideTheJobIsRefused) {
  json reply = {{"backup_task", {{"id", "b"}, {"part", 5}, {"step", 3}}}};
  EXPECT_EQ(BackupNews::FromReply(reply, "j", 4).status().code(), StatusCode::kInvalidArgument);
  auto ok = BackupNews::FromReply(reply, "j", 8);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->task, (BackupTask{"b", {"j", 5, 3}}));
  EXPECT_EQ(BackupNews::FromReply({{"backup_task", "x"}}, "j", 8).status().code(),
            StatusCode::kInvalidArgument);
  auto none = BackupNews::FromReply({{"watermark", 3}}, "j", 8);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->task.has_value());
}

}  // namespace
}  // namespace strata::agent
