// Copyright 2026 The Strata Authors.
//
// ClientFiles, the node's side of the client file protocol, as a component
// in one process over a real directory watched with inotify: the yaml taken
// when complete and validated (a bad one refused where the client reads
// it), jax-init-info.txt, committed steps ingested once, and PyTorch .save
// files gathered into a step only when all workers' files are settled.
#include "agent/node/client_files.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "format/naming.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/thread_pool.h"

namespace strata::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class ClientFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir());
    auto store = Store::Open(dir(), &pool_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    local_ = std::make_unique<LocalDir>(Env::Default(), dir());
    client_ = std::make_unique<ClientFiles>(Env::Default(), SteadyClock::Real(), store_.get(),
                                            local_.get(),
                                            ClientFiles::Options{3, "10.0.0.1:8476", Pending()});
  }

  // A second ClientFiles over the same directories: the agent restarted.
  void Restart() {
    client_ = std::make_unique<ClientFiles>(Env::Default(), SteadyClock::Real(), store_.get(),
                                            local_.get(),
                                            ClientFiles::Options{3, "10.0.0.1:8476", Pending()});
  }

  std::string dir() const { return scratch_.Sub("client"); }
  std::string File(std::string_view name) const { return JoinPath(dir(), std::string(name)); }
  std::string Pending() const { return JoinPath(store_->root(), std::string(kPendingStartFile)); }

  // Waits until the watcher says a look is due; returns whether a complete
  // yaml arrived.
  bool NextLook() {
    for (int i = 0; i < 50; ++i) {
      auto look = client_->Wait(100ms);
      EXPECT_TRUE(look.ok()) << look.status().ToString();
      if (look.ok() && *look) return **look;
    }
    ADD_FAILURE() << "no look was due";
    return false;
  }

  static ReplicatorConfig Job(Framework framework, int workers) {
    ReplicatorConfig c;
    c.job_name = "job1";
    c.framework = framework;
    c.node_rank = 3;
    c.nodes = 4;
    c.workers_per_node = workers;
    return c;
  }

  testing::ScratchDir scratch_{"client-files"};
  ThreadPool pool_{1};
  std::unique_ptr<Store> store_;
  std::unique_ptr<LocalDir> local_;
  std::unique_ptr<ClientFiles> client_;
};

// A yaml the client finished writing (closed) is reported once and taken
// validated; the node-rank mismatch with --node-rank is only a warning.
TEST_F(ClientFilesTest, AClosedYamlIsReportedAndTakenValidated) {
  auto at_start = client_->Watch();
  ASSERT_TRUE(at_start.ok()) << at_start.status().ToString();
  if (client_->polling()) GTEST_SKIP() << "no inotify here: the rescans decide";
  EXPECT_FALSE(*at_start);  // nothing written while the agent was down
  testing::WriteFile(File(kReplicatorYaml),
                     "job-name: job1\nframework: orbax\nnode-rank: 0\nnodes: 2\n");
  EXPECT_TRUE(NextLook());
  auto job = client_->TakeYaml();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->job_name, "job1");
  EXPECT_EQ(job->nodes, 2);
  EXPECT_TRUE(fs::exists(File(kReplicatorYaml)));  // Restore removes it once registered
}

// A yaml that does not validate is refused where the client looks
// (replicator.failed, with the field named) and removed, so it is not
// taken again; a missing one is NOT_FOUND and reports nothing.
TEST_F(ClientFilesTest, ABadYamlIsRefusedToTheClientAndRemoved) {
  ASSERT_TRUE(client_->Watch().ok());
  EXPECT_EQ(client_->TakeYaml().status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(File(kFailedFile)));
  testing::WriteFile(File(kReplicatorYaml), "job-name: job1\nframework: orbax\nnodes: 2\n");
  auto job = client_->TakeYaml();
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(File(kReplicatorYaml)));
  const std::string failed = testing::ReadFile(File(kFailedFile));
  EXPECT_NE(failed.find("node-rank"), std::string::npos) << failed;
}

// The client reads the error files as soon as its yaml is gone: an earlier
// start's lines go before a refused yaml's reason is written, and what a
// taken yaml asks that the agent does not do is named for replicator.errors.
TEST_F(ClientFilesTest, TheErrorFilesSpeakOfThisStartOnly) {
  ASSERT_TRUE(client_->Watch().ok());
  testing::WriteFile(File(kErrorsFile), "an earlier start's line\n");
  testing::WriteFile(File(kFailedFile), "an earlier start's failure\n");
  testing::WriteFile(File(kReplicatorYaml), "job-name: job1\nframework: orbax\nnodes: 2\n");
  EXPECT_EQ(client_->TakeYaml().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(testing::ReadFile(File(kErrorsFile)).find("earlier"), std::string::npos);
  EXPECT_EQ(testing::ReadFile(File(kFailedFile)).find("earlier"), std::string::npos);

  testing::WriteFile(File(kReplicatorYaml),
                     "job-name: job1\nframework: orbax\nnode-rank: 0\nnodes: 2\ncolour: blue\n");
  ASSERT_TRUE(client_->TakeYaml().ok());
  EXPECT_EQ(client_->yaml_warnings(),
            (std::vector<std::string>{
                "replicator.yaml: ignoring unknown key \"colour\"",
                "replicator.yaml: node-rank 0 differs from this agent's --node-rank 3 "
                "(jax-init-info.txt says 3)"}));
}

// A taken yaml is kept as the pending start until the start ends. An agent
// restarted while one is pending puts the yaml back (the client polls for
// markers and never writes it again), unless the client wrote a new one.
TEST_F(ClientFilesTest, AStartLeftPendingIsResumedByTheNextAgentProcess) {
  const std::string yaml = "job-name: job1\nframework: orbax\nnode-rank: 3\nnodes: 4\n";
  testing::WriteFile(File(kReplicatorYaml), yaml);
  ASSERT_TRUE(client_->TakeYaml().ok());
  EXPECT_EQ(testing::ReadFile(Pending()), yaml);
  fs::remove(File(kReplicatorYaml));  // as Restore does once registered

  Restart();  // killed before the markers
  auto at_start = client_->Watch();
  ASSERT_TRUE(at_start.ok()) << at_start.status().ToString();
  EXPECT_EQ(testing::ReadFile(File(kReplicatorYaml)), yaml);
  EXPECT_TRUE(*at_start || client_->polling());
  auto job = client_->TakeYaml();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->node_rank, 3);

  ASSERT_TRUE(client_->EndPendingStart().ok());  // answered: nothing to resume
  fs::remove(File(kReplicatorYaml));
  Restart();
  ASSERT_TRUE(client_->Watch().ok());
  EXPECT_FALSE(fs::exists(File(kReplicatorYaml)));

  // A new yaml written while the agent was down wins over a pending one.
  testing::WriteFile(File(kReplicatorYaml), yaml);
  ASSERT_TRUE(client_->TakeYaml().ok());
  const std::string newer = "job-name: job1\nframework: orbax\nnode-rank: 3\nnodes: 8\n";
  testing::WriteFile(File(kReplicatorYaml), newer);
  Restart();
  ASSERT_TRUE(client_->Watch().ok());
  EXPECT_EQ(testing::ReadFile(File(kReplicatorYaml)), newer);
  EXPECT_FALSE(fs::exists(Pending()));

  // So does one the client is still writing (its temporary name).
  fs::remove(File(kReplicatorYaml));
  testing::WriteFile(Pending(), yaml);
  testing::WriteFile(File(kReplicatorYamlTmp), newer);
  Restart();
  ASSERT_TRUE(client_->Watch().ok());
  EXPECT_FALSE(fs::exists(File(kReplicatorYaml)));
  EXPECT_FALSE(fs::exists(Pending()));

  // A start pending for longer than any client waits is dropped.
  fs::remove(File(kReplicatorYamlTmp));
  testing::WriteFile(Pending(), yaml);
  fs::last_write_time(Pending(), fs::file_time_type::clock::now() - std::chrono::hours(1));
  Restart();
  ASSERT_TRUE(client_->Watch().ok());
  EXPECT_FALSE(fs::exists(File(kReplicatorYaml)));
  EXPECT_FALSE(fs::exists(Pending()));
}

TEST_F(ClientFilesTest, JaxInitInfoNamesTheProcessIndexAndCoordinator) {
  client_->KeepJaxInitInfo();
  EXPECT_EQ(testing::ReadFile(File(kJaxInitInfoFile)), "3\n10.0.0.1:8476\n");
  fs::remove(File(kJaxInitInfoFile));  // a client cleaned up: it comes back
  client_->KeepJaxInitInfo();
  EXPECT_EQ(testing::ReadFile(File(kJaxInitInfoFile)), "3\n10.0.0.1:8476\n");
}

// A committed step directory is ingested into the store once; a step
// directory still being written (a temporary name) is not.
TEST_F(ClientFilesTest, CommittedStepsAreIngestedOnce) {
  fs::create_directories(File("5/sub"));
  testing::WriteFile(File("5/state.bin"), std::string(4096, 'x'));
  testing::WriteFile(File("5/sub/opt.bin"), "opt");
  fs::create_directories(File(TempDirName(6)));
  testing::WriteFile(File(TempDirName(6)) + "/state.bin", "partial");
  const ReplicatorConfig job = Job(Framework::kOrbax, 1);
  std::vector<wire::StepKey> got = client_->Ingest(job, {ec::Redundancy{}, 2, 0});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (wire::StepKey{"job1", 3, 5}));
  EXPECT_TRUE(store_->Has({"job1", 3, 5}));
  EXPECT_TRUE(store_->Verify({"job1", 3, 5}).ok());
  EXPECT_TRUE(client_->Ingest(job, {ec::Redundancy{}, 2, 0}).empty());
  EXPECT_FALSE(store_->Has({"job1", 3, 6}));
}

// _BACKUP_REQUESTED in a step directory asks for a backup of the step: it
// is taken out before the step, and the step is named as requested. A
// request made after the step was taken comes as a directory holding that
// file alone.
TEST_F(ClientFilesTest, ABackupRequestIsTakenOutOfTheStep) {
  fs::create_directories(File("7"));
  testing::WriteFile(File("7/state.bin"), std::string(4096, 'x'));
  testing::WriteFile(File("7/_BACKUP_REQUESTED"), "");
  fs::create_directories(File("8"));
  testing::WriteFile(File("8/state.bin"), std::string(4096, 'y'));
  const ReplicatorConfig job = Job(Framework::kOrbax, 1);
  std::set<int64_t> requested;
  std::vector<wire::StepKey> got = client_->Ingest(job, {ec::Redundancy{}, 1, 0}, &requested);
  EXPECT_EQ(got.size(), 2u);
  EXPECT_EQ(requested, std::set<int64_t>{7});
  auto index = store_->GetIndex({"job1", 3, 7});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_EQ(index->files.size(), 1u) << "the request is not checkpoint content";
  EXPECT_EQ(index->files[0].path, "state.bin");

  fs::create_directories(File("8"));  // asked after the step was taken
  testing::WriteFile(File("8/_BACKUP_REQUESTED"), "");
  requested.clear();
  EXPECT_TRUE(client_->Ingest(job, {ec::Redundancy{}, 1, 0}, &requested).empty());
  EXPECT_EQ(requested, std::set<int64_t>{8});
  EXPECT_FALSE(fs::exists(File("8")));
  EXPECT_TRUE(store_->Verify({"job1", 3, 8}).ok()) << "the held step is untouched";
}

// PyTorch workers write their .save files in place: a step is gathered only
// once every worker's file is there and none changed for a second.
TEST_F(ClientFilesTest, PytorchSavesBecomeAStepOnceAllAreSettled) {
  const ReplicatorConfig job = Job(Framework::kPytorch, 2);
  const std::string w0 = File(SaveFileName({"job1", 8, 3, 0}));
  const std::string w1 = File(SaveFileName({"job1", 8, 3, 1}));
  testing::WriteFile(w0, std::string(3000, '0'));
  fs::last_write_time(w0, fs::file_time_type::clock::now() - 5s);
  EXPECT_TRUE(client_->Ingest(job, {ec::Redundancy{}, 1, 0}).empty()) << "one worker of two";
  testing::WriteFile(w1, std::string(3000, '1'));
  fs::last_write_time(w1, fs::file_time_type::clock::now() + 1h);  // just written, on any clock
  EXPECT_TRUE(client_->Ingest(job, {ec::Redundancy{}, 1, 0}).empty())
      << "worker 1's file is still fresh";
  fs::last_write_time(w1, fs::file_time_type::clock::now() - 5s);
  std::vector<wire::StepKey> got = client_->Ingest(job, {ec::Redundancy{}, 1, 0});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (wire::StepKey{"job1", 3, 8}));
  EXPECT_FALSE(fs::exists(w0));
  EXPECT_TRUE(store_->Verify({"job1", 3, 8}).ok());
}

}  // namespace
}  // namespace strata::agent
