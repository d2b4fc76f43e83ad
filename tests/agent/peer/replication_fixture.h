// Copyright 2026 The Strata Authors.
//
// The fixture of the Replication tests (replication_test.cc, and the man in
// the middle in replication_tamper_test.cc): two nodes, each a real store
// with its Replication, node 1's receiving side served by a real Server on
// loopback; the coordinator is played by the test through node 0's hooks;
// time moves by a ManualClock. Included once per test source.
#ifndef STRATA_TESTS_AGENT_PEER_REPLICATION_FIXTURE_H_
#define STRATA_TESTS_AGENT_PEER_REPLICATION_FIXTURE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/peer/replication.h"
#include "agent/peer/retention.h"
#include "agent/rpc/server.h"
#include "component_util.h"
#include "format/naming.h"
#include "format/sync_map.h"
#include "strata/checkpointer.h"
#include "tamper_proxy.h"
#include "test_util.h"
#include "util/file_util.h"
#include "util/metrics.h"
#include "util/thread_pool.h"
#include "wire/op.h"

namespace strata::agent {
// Named, not anonymous: the tests that use it are named namespaces inside
// it (a unity build compiles them with other tests).
namespace replication_fixture {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kReplicationSecret[] = "replication-test-secret-012345678";

// One node: its store and its Replication.
struct Node {
  explicit Node(const std::string& tag) : dir(tag) {}
  testing::ScratchDir dir;
  ThreadPool pool{1};
  std::unique_ptr<Store> store;
  std::unique_ptr<Replication> replication;
};

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (Node* n : {&sender_, &receiver_}) {
      auto store = Store::Open(n->dir.Sub("store"), &n->pool);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      n->store = std::move(*store);
    }
    target_.config.job_name = "job1";
    target_.config.node_rank = 0;
    target_.config.nodes = 2;
    target_.peers = {1};
    Replication::Hooks hooks;
    hooks.on_replica = [this](const wire::StepKey&, uint64_t) { ++adopted_; };
    hooks.target = [this] {
      std::lock_guard<std::mutex> l(mu_);
      return receiver_target_;
    };
    receiver_.replication = Make(receiver_, std::move(hooks));
    ServeReceiver();
  }

  void TearDown() override {
    stall_ = false;               // a test that failed may have left node 1 stalled
    sender_.replication.reset();  // its thread calls the hooks, which use the members
    server_.reset();
    receiver_.replication.reset();
  }

  // Node 1's receiving side on a real server; its address goes in the target.
  void ServeReceiver() {
    Server::Handlers handlers;
    handlers.long_call = [this](const json& request, net::Socket& socket) -> StatusOr<json> {
      STRATA_ASSIGN_OR_RETURN(wire::Op op, wire::ParseOp(request));
      Replication& r = *receiver_.replication;
      if (op == wire::Op::kPutStep) {
        ++puts_;
        if (forget_on_put_) sender_.replication->Forget();
        if (refuse_) return UnavailableError("node 1 is restarting");
        while (stall_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        STRATA_ASSIGN_OR_RETURN(auto req, wire::PutStepRequest::FromJson(request));
        return r.HandlePutStep(req, socket);
      }
      if (op == wire::Op::kPutFiles) {
        ++put_files_;
        STRATA_ASSIGN_OR_RETURN(auto req, wire::PutFilesRequest::FromJson(request));
        return r.HandlePutFiles(req, socket);
      }
      return UnimplementedError("not served here");
    };
    auto server = testing::ServeOnLoopback(trust_, std::move(handlers), &receiver_address_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  std::unique_ptr<Replication> Make(Node& n, Replication::Hooks hooks) {
    Replication::Options options;
    options.trust = trust_;
    options.local_dir = n.dir.Sub("client");
    options.data_streams = 4;
    options.bounded_collection_fill = bounded_collection_fill_;
    fs::create_directories(options.local_dir);
    return std::make_unique<Replication>(options, n.store.get(), Env::Default(), &clock_,
                                         testing::IdleReplicationHooks(std::move(hooks)));
  }

  // Node 0's Replication, sending to node 1 at `address`; the coordinator
  // records each report and answers with watermark_.
  void StartSender(const std::string& address, int64_t priority = kNoSyncStep,
                   std::set<wire::StepKey> pins = {}) {
    target_.addresses = {{1, address}};
    Replication::Hooks hooks;
    hooks.target = [this] { return std::optional<Replication::Target>(target_); };
    hooks.priority_step = [priority] { return priority; };
    hooks.pins = [pins] { return pins; };
    hooks.call_coordinator = [this](const ReplicatorConfig&, const json& request,
                                    std::chrono::milliseconds) -> StatusOr<json> {
      if (while_reporting_) while_reporting_();
      std::lock_guard<std::mutex> l(mu_);
      reported_.push_back(request.at("step").get<int64_t>());
      cv_.notify_all();
      return json{{"ok", true}, {"watermark", watermark_}};
    };
    sender_.replication = Make(sender_, std::move(hooks));
  }

  // Node 0 holds steps 10 to 60 and sends 60; the coordinator answers its
  // report with the watermark 20.
  void SendWithTheWatermarkAt20() {
    StartSender(receiver_address_);
    watermark_ = 20;
    for (int64_t step : {10, 20, 30, 40, 50, 60}) Ingest(step);
    sender_.replication->Enqueue(Key(60));
    sender_.replication->Start();
    Reports(1);
  }

  // Node 0 ingests step `step` (files of `bytes` each).
  StepIndex Ingest(int64_t step, size_t bytes = 3000) {
    const std::string client = sender_.dir.Sub("in" + std::to_string(step));
    fs::create_directories(client + "/sub");
    testing::WriteFile(client + "/a.bin", std::string(bytes, static_cast<char>('a' + step % 26)));
    testing::WriteFile(client + "/sub/b.bin", std::string(bytes / 3, 'b'));
    auto index = sender_.store->Ingest(client, Key(step));
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    return index.ok() ? *index : StepIndex();
  }

  wire::StepKey Key(int64_t step) const { return {"job1", 0, step}; }

  // `node` ingests a step `key` of these files (path -> content).
  static StepIndex IngestFiles(Node& node, const wire::StepKey& key,
                               const std::map<std::string, std::string>& files) {
    const std::string client =
        node.dir.Sub("in-" + std::to_string(key.rank) + "-" + std::to_string(key.step));
    for (const auto& [path, content] : files) {
      fs::create_directories(fs::path(client + "/" + path).parent_path());
      testing::WriteFile(client + "/" + path, content);
    }
    auto index = node.store->Ingest(client, key);
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    return index.ok() ? *index : StepIndex();
  }

  // Node 0 saves a Strata checkpoint of `step` with two float32 items in
  // 64 KiB chunks, "frozen" and "trained", and ingests it.
  StepIndex IngestStrata(int64_t step, const std::vector<float>& frozen,
                         const std::vector<float>& trained) {
    const std::string client = sender_.dir.Sub("strata" + std::to_string(step));
    CheckpointerOptions o;
    o.async = false;
    o.chunk_size = 64 << 10;
    o.preemption_signals = {};
    auto ckpt = Checkpointer::Open(client, o);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    if (!ckpt.ok()) return {};
    const std::vector<Item> items = {
        {"frozen",
         DType::kFloat32,
         {static_cast<int64_t>(frozen.size())},
         frozen.data(),
         frozen.size() * 4},
        {"trained",
         DType::kFloat32,
         {static_cast<int64_t>(trained.size())},
         trained.data(),
         trained.size() * 4},
    };
    EXPECT_TRUE((*ckpt)->Save(step, items).ok());
    ckpt->reset();
    auto index = sender_.store->Ingest(JoinPath(client, StepDirName(step)), Key(step));
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    return index.ok() ? *index : StepIndex();
  }

  // Node 0's counter `family` for node 1 (0 when it has none yet).
  double SentTo(const std::string& family) const {
    const std::string text = metrics::Default().Render();
    const std::string key = family + "{peer=\"" + receiver_address_ + "\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }

  // Node 0 sends its step `step` to node 1, which refuses it: returns once
  // the failure shows in the progress.
  void SendRefusedStep(int64_t step) {
    refuse_ = true;
    StartSender(receiver_address_);
    Ingest(step);
    sender_.replication->Enqueue(Key(step));
    sender_.replication->Start();
    ASSERT_TRUE(testing::WaitUntil([&] { return !sender_.replication->progress().error.empty(); }));
  }

  // Node 0 sends its step 10 to node 1, which holds the put_step up
  // (stall_) before it answers: returns once the call has arrived.
  void SendStalledStep10() {
    StartSender(receiver_address_);
    stall_ = true;
    Ingest(10);
    sender_.replication->Enqueue(Key(10));
    sender_.replication->Start();
    ASSERT_TRUE(testing::WaitUntil([&] { return puts_ == 1; }));
  }

  // Waits until `step` was reported `times` times (idle refreshes re-report
  // the newest replicated step, so a count of reports says little).
  void AwaitReport(int64_t step, size_t times = 1) {
    std::unique_lock<std::mutex> l(mu_);
    EXPECT_TRUE(cv_.wait_for(l, 60s,
                             [&] {
                               return static_cast<size_t>(std::count(
                                          reported_.begin(), reported_.end(), step)) >= times;
                             }))
        << "step " << step << " not reported";
  }

  // Waits until `n` reports reached the coordinator; returns the steps.
  std::vector<int64_t> Reports(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    EXPECT_TRUE(cv_.wait_for(l, 30s, [&] { return reported_.size() >= n; }))
        << reported_.size() << " report(s)";
    return reported_;
  }

  net::Trust trust_ = testing::PskTrust(kReplicationSecret);  // both nodes'
  ManualClock clock_;
  Node sender_{"repl-node0"};
  Node receiver_{"repl-node1"};
  std::unique_ptr<Server> server_;
  std::string receiver_address_;
  std::atomic<int> puts_{0};         // put_step calls node 1 received
  std::atomic<int> put_files_{0};    // put_files calls (more streams of a put_step)
  std::atomic<bool> refuse_{false};  // node 1 refuses them
  std::atomic<int> adopted_{0};      // copies node 1 received and adopted
  Replication::Target target_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> reported_;                       // guarded by mu_
  std::optional<Replication::Target> receiver_target_;  // node 1's job; guarded by mu_
  int64_t watermark_ = -1;                              // guarded by mu_ once the sender started
  std::function<void()> while_reporting_;               // runs in each report, before its answer
  // Replication::Options::bounded_collection_fill of the nodes made from now
  // on: always bounded, whatever the test machine's disk holds.
  double bounded_collection_fill_ = 0;
  std::atomic<bool> stall_{false};  // node 1 holds each put_step until it is cleared
  // Each put_step at node 1 makes node 0 Forget (set after StartSender: the
  // atomic orders sender_.replication before the server thread's read).
  std::atomic<bool> forget_on_put_{false};
};

}  // namespace replication_fixture
}  // namespace strata::agent

#endif  // STRATA_TESTS_AGENT_PEER_REPLICATION_FIXTURE_H_
