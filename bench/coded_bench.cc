// Copyright 2026 The Strata Authors.
//
// The peer tier end to end in one process: 8 nodes, each a real Store,
// ParityStore, CodedTier and Replication behind a real Server on loopback,
// each holding a Strata checkpoint of its own (--size-mib per node, its own
// bytes). Replication runs on the components' own threads and reports to a
// stand-in coordinator. Prints absolute figures (median of --reps
// repetitions after a warm-up), then `ratio <name> <value> target <t>`:
//
//   coded_ram_rs62     RAM a node holds for the peer tier and its own step,
//                      measured in its stores (step + copies, or step +
//                      parity) ÷ its own step: copies with 2 peers ÷ rs(6,2),
//                      the same tolerance (any 2 of 8 lost); the figures of
//                      copies with 1 peer and xor(8) (any 1) are printed too
//   coded_replication  every node sending 2 copies ÷ every node coding its
//                      step into rs(6,2) parity (time for all 8 to be done)
//   coded_restore      fetching a lost node's step whole from the peer that
//                      holds a copy ÷ decoding it from its group's shards (6
//                      per stripe), into an empty store, verified
//   dedup_dp           bytes a data-parallel replica's step costs on the wire
//                      without dedup ÷ with it (the peer holds its own
//                      identical step: nothing needs to travel); reported as
//                      bytes saved ÷ bytes of the step
//   dedup_frozen       the same for a step whose frozen half (unchanged
//                      items) the peer holds from the previous step
//
// On loopback every node shares this machine's cores: the coded times pay
// the codec and the extra connections without the network that would
// dominate between hosts. Scratch: <tmpfs>/strata-bench-coded-<pid>.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/peer/coded_tier.h"
#include "agent/peer/replication.h"
#include "agent/plan/planner.h"
#include "agent/rpc/server.h"
#include "agent/rpc/transfer.h"
#include "agent/store/dedup.h"
#include "agent/store/parity_store.h"
#include "agent/store/store.h"
#include "bench_util.h"
#include "format/naming.h"
#include "strata/checkpointer.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/metrics.h"
#include "wire/coded.h"
#include "wire/data.h"
#include "wire/op.h"

namespace strata {
namespace {

using agent::json;
using bench::Clock;
using bench::kMiB;
using bench::Payload;
using bench::PrintRatio;
using bench::PrintSamples;
using bench::Samples;
using bench::SecondsSince;

constexpr int kNodes = 8;
constexpr char kSecret[] = "coded-bench-secret-0123456789abcd";

// The agents' default: TLS 1.3 keyed by the job's secret.
net::Trust JobTrust() {
  static const net::Trust trust = *net::MakeTrust(kSecret, net::TlsOptions{});
  return trust;
}

// Saves `halves` (two float32 items of equal size) as `step` into `dir`.
StatusOr<std::string> WriteCheckpoint(const std::string& dir, int64_t step,
                                      const std::vector<uint64_t>& first,
                                      const std::vector<uint64_t>& second) {
  std::vector<Item> items;
  for (const auto* half : {&first, &second}) {
    const int64_t rows = static_cast<int64_t>(half->size() * 8 / 4096);
    items.push_back({"tensor." + std::to_string(items.size()),
                     DType::kFloat32,
                     {rows, 1024},
                     half->data(),
                     static_cast<uint64_t>(rows) * 4096});
  }
  CheckpointerOptions o;
  o.async = false;
  o.max_to_keep = 0;
  o.preemption_signals = {};
  STRATA_ASSIGN_OR_RETURN(auto ckpt, Checkpointer::Open(dir, o));
  STRATA_RETURN_IF_ERROR(ckpt->Save(step, items).status());
  return JoinPath(dir, StepDirName(step));
}

// The sum of a counter family's samples in the process's metrics.
double Counter(const std::string& family) {
  const std::string text = metrics::Default().Render();
  double total = 0;
  for (size_t at = text.find("\n" + family + "{"); at != std::string::npos;
       at = text.find("\n" + family + "{", at + 1)) {
    const size_t value = text.find("} ", at);
    total += std::stod(text.substr(value + 2));
  }
  return total;
}

class Node {
 public:
  Node(int rank, std::string dir) : rank_(rank), dir_(std::move(dir)) {}
  ~Node() { Stop(); }

  Status Open() {
    STRATA_ASSIGN_OR_RETURN(store_, agent::Store::Open(dir_, &pool_));
    STRATA_ASSIGN_OR_RETURN(
        parity_, agent::ParityStore::Open(JoinPath(store_->root(), "parity"), Env::Default()));
    coded_ = std::make_unique<agent::CodedTier>(agent::CodedTier::Options{JobTrust(), dir_, 4},
                                                store_.get(), parity_.get(), clock_);
    STRATA_ASSIGN_OR_RETURN(net::Socket listener, net::Socket::Listen("127.0.0.1", 0, 128));
    STRATA_ASSIGN_OR_RETURN(uint16_t port, listener.LocalPort());
    address_ = "127.0.0.1:" + std::to_string(port);
    replication_ = std::make_unique<agent::Replication>(
        agent::Replication::Options{JobTrust(), dir_, 4}, store_.get(), Env::Default(), clock_,
        Hooks(), coded_.get());
    agent::Server::Options options;
    options.trust = JobTrust();
    agent::Server::Handlers handlers;
    handlers.is_long = [](const std::string& name) { return wire::IsLongCall(name); };
    handlers.control = [this](const json& request, const std::string&, agent::Server::Reply reply) {
      auto r = wire::GetIndexRequest::FromJson(request);
      reply(r.ok() ? replication_->HandleGetIndex(*r) : StatusOr<json>(r.status()));
    };
    handlers.long_call = [this](const json& request, net::Socket& socket) {
      return LongCall(request, socket);
    };
    STRATA_ASSIGN_OR_RETURN(
        server_, agent::Server::Start(std::move(listener), options, std::move(handlers)));
    replication_->Start();
    return Status::Ok();
  }

  void Stop() {
    if (replication_) replication_->Stop();
    if (server_) server_->Stop();
  }

  // Serves `target` from now on and sends `key` under it; Wait returns once
  // it reported the step replicated.
  void Send(const wire::StepKey& key, agent::Replication::Target target) {
    {
      std::lock_guard<std::mutex> l(mu_);
      target_ = std::move(target);
      reported_ = false;
    }
    replication_->Forget();
    replication_->Enqueue(key);
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return reported_; });
  }
  void ClearTarget() {
    std::lock_guard<std::mutex> l(mu_);
    target_.reset();
  }

  int rank() const { return rank_; }
  const std::string& dir() const { return dir_; }
  const std::string& address() const { return address_; }
  agent::Store* store() { return store_.get(); }
  agent::ParityStore* parity() { return parity_.get(); }
  agent::CodedTier* coded() { return coded_.get(); }

 private:
  agent::Replication::Hooks Hooks() {
    agent::Replication::Hooks h;
    h.target = [this] {
      std::lock_guard<std::mutex> l(mu_);
      return target_;
    };
    h.priority_step = [] { return kNoSyncStep; };
    h.call_coordinator = [this](const agent::ReplicatorConfig&, const json&,
                                std::chrono::milliseconds) -> StatusOr<json> {
      std::lock_guard<std::mutex> l(mu_);
      reported_ = true;
      cv_.notify_all();
      return json{{"ok", true}, {"watermark", -1}};
    };
    h.cadence = [](const agent::ReplicatorConfig&) { return wire::Cadence(); };
    h.on_reply = [](const agent::ReplicatorConfig&, const wire::ReplicatedRequest&,
                    const wire::ReplicatedReply&) {};
    h.pins = [] { return std::set<wire::StepKey>(); };
    h.on_replica = [](const wire::StepKey&, uint64_t) {};
    return h;
  }

  StatusOr<json> LongCall(const json& request, net::Socket& socket) {
    STRATA_ASSIGN_OR_RETURN(wire::Op op, wire::ParseOp(request));
    switch (op) {
      case wire::Op::kPutStep: {
        STRATA_ASSIGN_OR_RETURN(auto r, wire::PutStepRequest::FromJson(request));
        return replication_->HandlePutStep(r, socket);
      }
      case wire::Op::kPutFiles: {
        STRATA_ASSIGN_OR_RETURN(auto r, wire::PutFilesRequest::FromJson(request));
        return replication_->HandlePutFiles(r, socket);
      }
      case wire::Op::kFetchStep: {
        STRATA_ASSIGN_OR_RETURN(auto r, wire::FetchStepRequest::FromJson(request));
        return replication_->HandleFetchStep(r, socket);
      }
      case wire::Op::kPutShard: {
        STRATA_ASSIGN_OR_RETURN(auto r, wire::PutShardRequest::FromJson(request));
        return coded_->HandlePutShard(r, socket, rank_);
      }
      case wire::Op::kGetShard: {
        STRATA_ASSIGN_OR_RETURN(auto r, wire::GetShardRequest::FromJson(request));
        return coded_->HandleGetShard(r, socket);
      }
      default:
        return UnimplementedError("not served here");
    }
  }

  const int rank_;
  const std::string dir_;
  ThreadPool pool_{ThreadPool::DefaultThreads() - 1};
  SteadyClock* const clock_ = SteadyClock::Real();
  std::unique_ptr<agent::Store> store_;
  std::unique_ptr<agent::ParityStore> parity_;
  std::unique_ptr<agent::CodedTier> coded_;
  std::unique_ptr<agent::Replication> replication_;
  std::unique_ptr<agent::Server> server_;
  std::string address_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<agent::Replication::Target> target_;  // guarded by mu_
  bool reported_ = false;                             // guarded by mu_
};

struct Bench {
  std::string scratch;
  int reps = 5;
  uint64_t bytes = 0;  // of each node's step
  std::vector<std::unique_ptr<Node>> nodes;
  std::map<int, std::string> addresses;
  std::vector<StepIndex> own;  // each node's step 1

  wire::StepKey Own(int rank) const { return {"job", rank, 1}; }
};

// Removes everything but each node's own step.
void Reset(Bench& b) {
  for (auto& n : b.nodes) {
    n->ClearTarget();
    for (const auto& [key, index] : n->store()->List()) {
      if (!(key == b.Own(n->rank()))) n->store()->Remove(key).IgnoreError();
    }
    for (const auto& [key, h] : n->parity()->List()) n->parity()->Remove(key).IgnoreError();
    n->store()->DropSpare();
  }
}

agent::Replication::Target TargetOf(const Bench& b, int rank, const std::string& redundancy,
                                    int peers) {
  agent::Replication::Target t;
  t.config.job_name = "job";
  t.config.node_rank = rank;
  t.config.nodes = kNodes;
  t.addresses = b.addresses;
  auto r = ec::Redundancy::Parse(redundancy);
  if (r->coded()) {
    std::vector<int> members;
    for (int i = 0; i < kNodes; ++i) members.push_back(i);
    t.group = ec::Group{members, r->kind, r->m};
    if (r->group_size() < kNodes) {  // xor(N) over 8: the group of N this node is in
      const int first = rank / r->group_size() * r->group_size();
      t.group->members.assign(members.begin() + first, members.begin() + first + r->group_size());
    }
  } else {
    t.peers = agent::ChoosePeers(rank, kNodes, peers);
  }
  return t;
}

// Every node sends its step the way `redundancy` says; the time until all
// reported, and the RAM factor of the tightest node.
Status SendAll(Bench& b, const std::string& redundancy, int peers, double* seconds, double* ram) {
  Reset(b);
  const auto t0 = Clock::now();
  for (auto& n : b.nodes) n->Send(b.Own(n->rank()), TargetOf(b, n->rank(), redundancy, peers));
  for (auto& n : b.nodes) n->Wait();
  *seconds = SecondsSince(t0);
  *ram = 0;
  for (auto& n : b.nodes) {
    const double held = static_cast<double>(n->store()->BytesHeld() + n->parity()->BytesHeld());
    *ram = std::max(*ram,
                    held / static_cast<double>(b.own[static_cast<size_t>(n->rank())].total_bytes));
  }
  for (auto& n : b.nodes) n->ClearTarget();
  return Status::Ok();
}

Status BenchRam(Bench& b) {
  std::printf("\n[coded_ram, coded_replication] 8 nodes, each sending its step as the tier says\n");
  struct Tier {
    const char* name;
    const char* redundancy;
    int peers;
    Samples time;
    double ram = 0;
  };
  std::vector<Tier> tiers = {{"copies, 1 peer (any 1 lost)", "copies", 1, {}, 0},
                             {"xor(8) (any 1 lost)", "xor(8)", 0, {}, 0},
                             {"copies, 2 peers (any 2 lost)", "copies", 2, {}, 0},
                             {"rs(6,2) (any 2 lost)", "rs(6,2)", 0, {}, 0}};
  for (int r = -1; r < b.reps; ++r) {
    for (Tier& t : tiers) {
      double seconds = 0;
      STRATA_RETURN_IF_ERROR(SendAll(b, t.redundancy, t.peers, &seconds, &t.ram));
      if (r >= 0) t.time.Add(seconds);
    }
  }
  for (const Tier& t : tiers) {
    PrintSamples(t.name, t.time, b.bytes * kNodes);
    std::printf("    RAM per node %.3f x its own step\n", t.ram);
  }
  PrintRatio("coded_ram_rs62", tiers[2].ram / tiers[3].ram, "2.0");
  PrintRatio("coded_ram_xor8", tiers[0].ram / tiers[1].ram, "1.6");
  PrintRatio("coded_replication", tiers[2].time.Median() / tiers[3].time.Median(), "");
  return Status::Ok();
}

// The lost node's source as the coordinator would plan it from what the
// nodes hold now.
StatusOr<wire::Source> PlanFor(Bench& b, int lost) {
  agent::Inventory inv;
  for (auto& n : b.nodes) {
    for (const auto& [key, index] : n->store()->List()) {
      inv.Add(key.rank, key.step, n->rank(), index.digest);
    }
    for (const wire::HeldParity& p : n->coded()->Inventory("job")) {
      inv.AddParity(n->rank(), p);
    }
  }
  agent::RestorePlan plan = agent::PlanRestore(inv, kNodes, 1);
  if (!plan.step || !plan.sources.count(lost)) return InternalError("no plan: " + plan.reason);
  return plan.sources[lost];
}

Status BenchRestore(Bench& b) {
  std::printf("\n[coded_restore] node 3's step into its empty store: fetched whole vs decoded\n");
  const int lost = 3;
  Node& node = *b.nodes[lost];
  const wire::StepKey key = b.Own(lost);
  Samples fetch, decode;
  for (int r = -1; r < b.reps; ++r) {
    double seconds = 0, ram = 0;
    // Copies: fetch node 3's step from its peer.
    STRATA_RETURN_IF_ERROR(SendAll(b, "copies", 1, &seconds, &ram));
    STRATA_RETURN_IF_ERROR(node.store()->Remove(key));
    node.store()->DropSpare();
    const int peer = agent::ChoosePeers(lost, kNodes, 1)[0];
    STRATA_ASSIGN_OR_RETURN(net::Endpoint from, net::ParseEndpoint(b.addresses.at(peer)));
    auto t0 = Clock::now();
    STRATA_ASSIGN_OR_RETURN(
        agent::FetchedCopy copy,
        agent::FetchCopy(from, JobTrust(), "node 3", key, 4, node.store(), b.own[lost].digest));
    STRATA_RETURN_IF_ERROR(agent::AdoptCopy(node.store(), key, copy));
    if (r >= 0) fetch.Add(SecondsSince(t0));
    // rs(6,2): decode it from its group.
    STRATA_RETURN_IF_ERROR(SendAll(b, "rs(6,2)", 0, &seconds, &ram));
    STRATA_RETURN_IF_ERROR(node.store()->Remove(key));
    for (const auto& [k, h] : node.parity()->List()) node.parity()->Remove(k).IgnoreError();
    node.store()->DropSpare();
    STRATA_ASSIGN_OR_RETURN(wire::Source src, PlanFor(b, lost));
    if (!src.decode) return InternalError("the plan does not decode node 3");
    std::vector<wire::FailedHolder> bad;
    t0 = Clock::now();
    STRATA_RETURN_IF_ERROR(
        node.coded()->Decode(key, src.digest, *src.decode, b.addresses, "node 3", &bad));
    if (r >= 0) decode.Add(SecondsSince(t0));
  }
  PrintSamples("baseline: fetch the whole step from a peer", fetch, b.bytes);
  PrintSamples("strata: decode it from 6 shards per stripe", decode, b.bytes);
  std::printf("    a decode reads %d x the step's bytes (k shards of every stripe)\n", 6);
  PrintRatio("coded_restore", fetch.Median() / decode.Median(), "");
  return Status::Ok();
}

// Node 0 replicates `key` to node 1 by content; the bytes it sent.
StatusOr<double> Replicate(Bench& b, const wire::StepKey& key, std::optional<int> dp) {
  agent::Replication::Target t;
  t.config.job_name = key.job;
  t.config.node_rank = 0;
  t.config.nodes = 2;
  t.peers = {1};
  t.addresses = {{1, b.addresses.at(1)}};
  if (dp) t.config.assume_data_parallelism = *dp;
  const double before = Counter("strata_replication_bytes_total");
  b.nodes[0]->Send(key, t);
  b.nodes[0]->Wait();
  b.nodes[0]->ClearTarget();
  return Counter("strata_replication_bytes_total") - before;
}

Status BenchDedup(Bench& b) {
  std::printf("\n[dedup_dp, dedup_frozen] node 0's step to node 1 by content\n");
  const uint64_t half = b.bytes / 2;
  const std::vector<uint64_t> frozen = Payload(half, 77);
  double sent_alone = 0, sent_replica = 0, sent_frozen = 0;
  Samples alone, replica, partly;
  uint64_t step_bytes = 0;
  for (int r = -1; r < b.reps; ++r) {
    Reset(b);
    const std::string job = "dp" + std::to_string(r + 1);
    const std::vector<uint64_t> trained = Payload(half, 1000 + static_cast<uint64_t>(r + 1));
    // The same step on both nodes, as data-parallel replicas save it.
    for (int n : {0, 1}) {
      STRATA_ASSIGN_OR_RETURN(
          std::string dir, WriteCheckpoint(JoinPath(b.scratch, "dp-client" + std::to_string(n)), 1,
                                           frozen, trained));
      STRATA_ASSIGN_OR_RETURN(StepIndex index, b.nodes[n]->store()->Ingest(dir, {job, n, 1}));
      step_bytes = index.total_bytes;
    }
    // Without dedup to use: node 1 lacks its own step.
    STRATA_RETURN_IF_ERROR(b.nodes[1]->store()->Remove({job, 1, 1}));
    auto t0 = Clock::now();
    STRATA_ASSIGN_OR_RETURN(sent_alone, Replicate(b, {job, 0, 1}, std::nullopt));
    if (r >= 0) alone.Add(SecondsSince(t0));
    STRATA_RETURN_IF_ERROR(b.nodes[1]->store()->Remove({job, 0, 1}));
    // Node 1 holds its own identical step.
    STRATA_ASSIGN_OR_RETURN(
        std::string dir, WriteCheckpoint(JoinPath(b.scratch, "dp-client1b"), 1, frozen, trained));
    STRATA_RETURN_IF_ERROR(b.nodes[1]->store()->Ingest(dir, {job, 1, 1}).status());
    t0 = Clock::now();
    STRATA_ASSIGN_OR_RETURN(sent_replica, Replicate(b, {job, 0, 1}, 2));
    if (r >= 0) replica.Add(SecondsSince(t0));
    // Step 2: the trained half changed, the frozen half did not; node 1
    // holds node 0's step 1.
    const std::vector<uint64_t> next = Payload(half, 5000 + static_cast<uint64_t>(r + 1));
    STRATA_ASSIGN_OR_RETURN(dir,
                            WriteCheckpoint(JoinPath(b.scratch, "dp-client0b"), 2, frozen, next));
    STRATA_RETURN_IF_ERROR(b.nodes[0]->store()->Ingest(dir, {job, 0, 2}).status());
    t0 = Clock::now();
    STRATA_ASSIGN_OR_RETURN(sent_frozen, Replicate(b, {job, 0, 2}, std::nullopt));
    if (r >= 0) partly.Add(SecondsSince(t0));
  }
  const double total = static_cast<double>(step_bytes);
  PrintSamples("baseline: the peer holds nothing of it", alone, step_bytes);
  std::printf("    sent %.1f MiB of %.1f MiB\n", sent_alone / kMiB, total / kMiB);
  PrintSamples("strata: the peer holds its own replica", replica, step_bytes);
  std::printf("    sent %.1f MiB\n", sent_replica / kMiB);
  PrintSamples("strata: the peer holds the frozen half", partly, step_bytes);
  std::printf("    sent %.1f MiB\n", sent_frozen / kMiB);
  PrintRatio("dedup_dp", (sent_alone - sent_replica) / total, "0.99");
  PrintRatio("dedup_frozen", (sent_alone - sent_frozen) / total, "0.45");
  return Status::Ok();
}

Status SetUp(Bench& b, uint64_t size) {
  for (int r = 0; r < kNodes; ++r) {
    b.nodes.push_back(std::make_unique<Node>(r, JoinPath(b.scratch, "node" + std::to_string(r))));
    STRATA_RETURN_IF_ERROR(b.nodes.back()->Open());
    b.addresses[r] = b.nodes.back()->address();
  }
  for (int r = 0; r < kNodes; ++r) {
    const std::vector<uint64_t> a = Payload(size / 2, 2 * r + 1), c = Payload(size / 2, 2 * r + 2);
    STRATA_ASSIGN_OR_RETURN(
        std::string dir,
        WriteCheckpoint(JoinPath(b.scratch, "client" + std::to_string(r)), 1, a, c));
    STRATA_ASSIGN_OR_RETURN(StepIndex index, b.nodes[r]->store()->Ingest(dir, b.Own(r)));
    b.own.push_back(index);
  }
  b.bytes = b.own[0].total_bytes;
  return Status::Ok();
}

int Main(int argc, char** argv) {
  CLI::App app("coded_bench: the peer tier's codes and replication by content, 8 nodes");
  uint64_t size_mib = 64;
  std::string tmpfs = "/dev/shm";
  std::vector<std::string> only;
  Bench b;
  app.add_option("--size-mib", size_mib, "Each node's step in MiB (8 nodes)")
      ->envname("STRATA_CODED_BENCH_SIZE_MIB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{4096}));
  app.add_option("--reps", b.reps, "Timed repetitions (the median is reported)")
      ->envname("STRATA_BENCH_REPS")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--tmpfs", tmpfs, "Directory on a RAM file system for scratch files")
      ->envname("STRATA_BENCH_TMPFS")
      ->capture_default_str();
  app.add_option("benchmarks", only, "Benchmarks to run (default all)")
      ->check(CLI::IsMember({"coded_ram", "coded_restore", "dedup"}));
  CLI11_PARSE(app, argc, argv);
  if (std::getenv("STRATA_LOG_LEVEL") == nullptr) SetLogLevel("warn");
  b.scratch = JoinPath(tmpfs, "strata-bench-coded-" + std::to_string(::getpid()));
  std::error_code ec;
  std::filesystem::create_directories(b.scratch, ec);
  auto run = [&](const char* name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  Status s = SetUp(b, size_mib * kMiB);
  if (s.ok()) {
    std::printf("coded_bench: 8 nodes on loopback, a %.1f MiB Strata checkpoint each, %d reps\n",
                static_cast<double>(b.bytes) / kMiB, b.reps);
    if (run("coded_ram")) s = BenchRam(b);
    if (s.ok() && run("coded_restore")) s = BenchRestore(b);
    if (s.ok() && run("dedup")) s = BenchDedup(b);
  }
  b.nodes.clear();
  std::filesystem::remove_all(b.scratch, ec);
  if (!s.ok()) {
    std::fprintf(stderr, "coded_bench: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
