// Copyright 2026 The Strata Authors.
//
// Agent benchmarks: the agent's transfers over loopback against a raw
// single-stream TCP transfer of the same bytes in the same run. Each prints
// absolute figures (median of --reps repetitions after a warm-up; baseline
// and Strata repetitions alternate), then `ratio <name> <value> target <t>`:
//
//   peer_replication   bytes / (connect -> ack) of Replication::SendToPeer's
//                      sequence to a live agent, which receives, verifies and
//                      commits before it acks ÷ raw memory->memory throughput
//   restore_from_peer  raw memory->memory time ÷ time of Agent::FetchFrom
//                      into an empty store (no copy, no spare files) from a
//                      live agent: FetchCopy over the default data-streams,
//                      verifying as the data arrives, then the commit
//   restart_check      time to read and verify 3 held copies of the step ÷
//                      time to prove them unchanged by their seals, as a
//                      restarted agent does before it registers
//   tls_cost           the two transfers above against an agent with TLS off
//                      and one with TLS 1.3 (psk, the default), alternating:
//                      plaintext time ÷ TLS time, next to the raw socket
//
// The first two run with --tls (default off: they measure the data path
// against raw TCP; psk runs them as agents run by default).
// The step is a real Strata checkpoint (sync Checkpointer) in the sender's
// Store; the agent runs in-process on 127.0.0.1, port 0. Raw baselines use
// 1 MiB socket buffers and send/recv calls (iperf3 -w 1M -l 1M); for context,
// also file->file (pread+send -> recv+pwrite into a new / an existing tmpfs
// file). Scratch: <tmpfs>/strata-bench-<pid>, removed at exit.
#include "agent_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "util/file_util.h"
#include "util/logging.h"
#include "util/ram_disk.h"

namespace strata::agent_bench {

using bench::Clock;
using bench::kMiB;
using bench::Payload;
using bench::PrintRatio;
using bench::PrintSamples;
using bench::SecondsSince;

// --- peer_replication ---

namespace {

struct ReplicationSamples {
  Samples mem, file_new, file_over;
  PhaseSamples put;
};

Status ReplicationRep(Bench& b, int over_fd, ReplicationSamples* s) {
  STRATA_RETURN_IF_ERROR(AddTo(&s->mem, RawTransfer({.src = b.payload}, b.bytes)));
  std::string new_file = JoinPath(b.scratch, "raw-dst-new.bin");
  STRATA_RETURN_IF_ERROR(AddTo(&s->file_new, RawToNewFile(b.payload_fd, new_file, b.bytes)));
  STRATA_RETURN_IF_ERROR(
      AddTo(&s->file_over, RawTransfer({.src_fd = b.payload_fd, .dst_fd = over_fd}, b.bytes)));
  STRATA_ASSIGN_OR_RETURN(Phases put, ReplicateOnce(b));
  s->put.Add(put);
  return Status::Ok();
}

}  // namespace

Status BenchPeerReplication(Bench& b) {
  std::printf(
      "\n[peer_replication] put_step to a live agent (verified, committed, acked) vs "
      "raw TCP, loopback\n");
  const std::string over = JoinPath(b.scratch, "raw-dst-over.bin");
  STRATA_RETURN_IF_ERROR(WritePayload(over, b.payload, b.bytes));
  UniqueFd over_fd(::open(over.c_str(), O_WRONLY | O_CLOEXEC));
  if (over_fd.get() < 0) return ErrnoToStatus(errno, "open " + over);
  ReplicationSamples warmup, s;
  STRATA_RETURN_IF_ERROR(ReplicationRep(b, over_fd.get(), &warmup));
  for (int r = 0; r < b.reps; ++r) STRATA_RETURN_IF_ERROR(ReplicationRep(b, over_fd.get(), &s));
  PrintSamples("baseline: raw mem->mem (1 MiB bufs)", s.mem, b.bytes);
  PrintSamples("context: raw file->new file", s.file_new, b.bytes);
  PrintSamples("context: raw file->overwritten file", s.file_over, b.bytes);
  PrintSamples("strata: put_step connect->ack", s.put.total, b.bytes);
  PrintSamples("  connect+auth+put_step call", s.put.call, 0);
  PrintSamples("  SendRanges (sendfile, every stream)", s.put.data, b.bytes);
  PrintSamples("  then until ack (rest of recv, Adopt)", s.put.finish, 0);
  PrintRatio("peer_replication", s.mem.Median() / s.put.total.Median(), "0.8");
  return Status::Ok();
}

// --- restore_from_peer ---

namespace {

struct RestoreSamples {
  Samples mem, verify;
  PhaseSamples fetch, one_stream;
};

// One raw transfer, one restore over one stream and one over the agent's
// default number of streams.
Status RestoreRep(Bench& b, Node& node, RestoreSamples* s) {
  const wire::StepKey& key = *b.replica;
  STRATA_RETURN_IF_ERROR(AddTo(&s->mem, RawTransfer({.src = b.payload}, b.bytes)));
  STRATA_RETURN_IF_ERROR(TimedFetch(b, node, key, 1, &s->one_stream));
  STRATA_RETURN_IF_ERROR(TimedFetch(b, node, key, b.streams, &s->fetch));
  // For context: what verifying the same data after the fact costs.
  Clock::time_point t0 = Clock::now();
  STRATA_RETURN_IF_ERROR(node.store->Verify(key));
  s->verify.Add(SecondsSince(t0));
  return Status::Ok();
}

}  // namespace

Status BenchRestoreFromPeer(Bench& b) {
  std::printf(
      "\n[restore_from_peer] a replaced node fetches from a live agent (Agent::FetchFrom: "
      "verified, committed) vs raw TCP, loopback\n");
  if (!b.replica) STRATA_RETURN_IF_ERROR(ReplicateOnce(b).status());
  Node node{JoinPath(b.scratch, "restoring")};
  STRATA_ASSIGN_OR_RETURN(node.store, agent::Store::Open(node.dir, &node.pool));
  RestoreSamples warmup, s;
  STRATA_RETURN_IF_ERROR(RestoreRep(b, node, &warmup));
  for (int r = 0; r < b.reps; ++r) STRATA_RETURN_IF_ERROR(RestoreRep(b, node, &s));
  PrintSamples("baseline: raw mem->mem (1 MiB bufs)", s.mem, b.bytes);
  PrintSamples("context: restore over 1 stream", s.one_stream.total, b.bytes);
  char label[96];
  std::snprintf(label, sizeof label, "strata: restore from peer (data-streams %d)", b.streams);
  PrintSamples(label, s.fetch.total, b.bytes);
  PrintSamples("  FetchCopy (new tmpfs files, verified on arrival)", s.fetch.data, b.bytes);
  PrintSamples("  AdoptCopy (layout check, commit)", s.fetch.finish, 0);
  PrintSamples("  (a verification after the fact: Store::Verify)", s.verify, b.bytes);
  PrintRatio("restore_from_peer", s.mem.Median() / s.fetch.total.Median(), "0.75");
  return Status::Ok();
}

// --- restart_check ---

// A restarted agent (the store reopened) checks the copies it holds before
// it registers: by their seals, reading no byte (Store::CheckHeld), against
// reading and verifying every copy (Store::Verify, what registration did
// before seals).
namespace {

struct RestartSamples {
  Samples seals, verify_all;
};

Status RestartRep(Node& node, const std::vector<wire::StepKey>& held, RestartSamples* s) {
  node.store.reset();
  STRATA_ASSIGN_OR_RETURN(node.store, agent::Store::Open(node.dir, &node.pool));
  Clock::time_point t0 = Clock::now();
  for (const wire::StepKey& key : held) {
    STRATA_ASSIGN_OR_RETURN(bool read, node.store->CheckHeld(key));
    if (read) return InternalError(key.ToString() + " was read: its seal did not prove it");
  }
  s->seals.Add(SecondsSince(t0));
  t0 = Clock::now();
  for (const wire::StepKey& key : held) STRATA_RETURN_IF_ERROR(node.store->Verify(key));
  s->verify_all.Add(SecondsSince(t0));
  return Status::Ok();
}

}  // namespace

Status BenchRestartCheck(Bench& b) {
  constexpr int kCopies = 3;  // its own step and two peers' (data-parallel replicas)
  std::printf(
      "\n[restart_check] a restarted agent checks the %d copies it holds (%.1f MiB): seals "
      "(no byte read) vs reading and verifying every copy\n",
      kCopies, static_cast<double>(b.bytes) * kCopies / kMiB);
  Node node{JoinPath(b.scratch, "holding")};
  STRATA_ASSIGN_OR_RETURN(node.store, agent::Store::Open(node.dir, &node.pool));
  std::vector<wire::StepKey> held;
  for (int r = 0; r < kCopies; ++r) {
    STRATA_ASSIGN_OR_RETURN(std::string dir, node.store->NewIncomingDir());
    std::error_code ec;
    std::filesystem::copy(b.sender->store->StepPath(b.key), dir,
                          std::filesystem::copy_options::recursive, ec);
    if (ec) return ErrnoToStatus(ec.value(), "copy the step into " + dir);
    held.push_back({kJob, r, b.key.step});
    STRATA_RETURN_IF_ERROR(node.store->Adopt(dir, held.back(), b.index));
  }
  RestartSamples warmup, s;
  // The warm-up also seals any copy adopted in the clock tick it was written.
  for (const wire::StepKey& key : held) STRATA_RETURN_IF_ERROR(node.store->CheckHeld(key).status());
  STRATA_RETURN_IF_ERROR(RestartRep(node, held, &warmup));
  for (int r = 0; r < b.reps; ++r) STRATA_RETURN_IF_ERROR(RestartRep(node, held, &s));
  PrintSamples("baseline: read and verify every copy", s.verify_all, b.bytes * kCopies);
  PrintSamples("strata: prove every copy by its seal", s.seals, 0);
  PrintRatio("restart_check", s.verify_all.Median() / s.seals.Median(), "10");
  return Status::Ok();
}

namespace {

// --- Driver ---

struct Benchmark {
  const char* name;
  Status (*run)(Bench&);
};
constexpr Benchmark kBenchmarks[] = {
    {"peer_replication", BenchPeerReplication},
    {"restore_from_peer", BenchRestoreFromPeer},
    {"restart_check", BenchRestartCheck},
    {"tls_cost", BenchTlsCost},
};

// The scratch directory, removed with everything in it when this goes.
struct Scratch {
  std::string path;
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Writes the checkpoint and ingests it into the sender's store.
Status PrepareSender(Bench& b, Node& sender, uint64_t state_bytes) {
  std::string step_dir;
  {
    std::vector<uint64_t> state = Payload(state_bytes);
    auto* p = reinterpret_cast<const std::byte*>(state.data());
    STRATA_ASSIGN_OR_RETURN(step_dir,
                            WriteCheckpoint(JoinPath(b.scratch, "client"), p, state_bytes));
  }
  STRATA_ASSIGN_OR_RETURN(sender.store, agent::Store::Open(sender.dir, &sender.pool));
  b.key = {kJob, 0, 1};
  STRATA_ASSIGN_OR_RETURN(b.index, sender.store->Ingest(step_dir, b.key));
  b.bytes = b.index.total_bytes;
  b.sender = &sender;
  return Status::Ok();
}

int RunAll(Bench& b, const std::vector<std::string>& only) {
  int failed = 0;
  for (const Benchmark& bm : kBenchmarks) {
    if (!only.empty() && std::find(only.begin(), only.end(), bm.name) == only.end()) continue;
    Status s = bm.run(b);
    if (!s.ok()) {
      std::fprintf(stderr, "agent_bench: %s: %s\n", bm.name, s.message().c_str());
      ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}

// Sets up the sender, the payload and the live agent, then runs.
Status SetUpAndRun(Bench& b, uint64_t state_bytes, const std::vector<std::string>& only, int* rc) {
  Node sender{JoinPath(b.scratch, "sender")};
  STRATA_RETURN_IF_ERROR(PrepareSender(b, sender, state_bytes));
  std::vector<uint64_t> payload = Payload(b.bytes);
  b.payload = reinterpret_cast<std::byte*>(payload.data());
  const std::string payload_file = JoinPath(b.scratch, "raw-src.bin");
  STRATA_RETURN_IF_ERROR(WritePayload(payload_file, b.payload, b.bytes));
  UniqueFd payload_fd(::open(payload_file.c_str(), O_RDONLY | O_CLOEXEC));
  if (payload_fd.get() < 0) return ErrnoToStatus(errno, "open " + payload_file);
  b.peer_dir = JoinPath(b.scratch, "peer");
  STRATA_ASSIGN_OR_RETURN(auto peer, LiveAgent::Start(b.peer_dir, b.secret, b.tls_mode));
  b.payload_fd = payload_fd.get();
  b.peer = peer.get();
  std::printf(
      "agent_bench: step of %.1f MiB in %zu files (Strata checkpoint), %d reps (median, "
      "min, max), %d verify threads, agent at %s (%s), scratch %s\n",
      static_cast<double>(b.bytes) / kMiB, b.index.files.size(), b.reps, sender.pool.parallelism(),
      peer->endpoint().ToString().c_str(), b.trust.Describe().c_str(), b.scratch.c_str());
  // The ratios depend on the scratch's page size (docs/performance.md has
  // both); say which one this run has.
  const RamDisk disk = DescribeRamDisk(b.scratch);
  std::printf(
      "agent_bench: scratch pages: %s\n",
      disk.HugePages()
          ? "huge (as the deployment mounts a node's RAM disk)"
          : "4 KiB; a node's RAM disk is mounted with huge=within_size (docs/agent-design.md), "
            "STRATA_BENCH_RAMDISK=huge measures that");
  std::fflush(stdout);
  *rc = RunAll(b, only);
  return Status::Ok();
}

int Main(int argc, char** argv) {
  CLI::App app("agent_bench: Strata agent transfers against raw TCP over loopback");
  uint64_t size_mib = 256;
  std::string tmpfs = "/dev/shm";
  std::vector<std::string> only;
  Bench b;
  b.reps = 9;
  app.add_option("--size-mib", size_mib, "State size in MiB")
      ->envname("STRATA_BENCH_SIZE_MIB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  app.add_option("--reps", b.reps, "Timed repetitions (the median is reported)")
      ->envname("STRATA_BENCH_REPS")
      ->capture_default_str()
      ->check(CLI::Range(5, 1000));
  app.add_option("--tmpfs", tmpfs, "Directory on a RAM file system for scratch files")
      ->envname("STRATA_BENCH_TMPFS")
      ->capture_default_str();
  app.add_option("benchmarks", only, "Benchmarks to run (default all)")
      ->check(
          CLI::IsMember({"peer_replication", "restore_from_peer", "restart_check", "tls_cost"}));
  std::string tls = "off";
  app.add_option("--tls", tls,
                 "TLS for peer_replication and restore_from_peer: off (the data path against raw "
                 "TCP) or psk (as agents run by default); tls_cost measures both")
      ->envname("STRATA_BENCH_TLS")
      ->capture_default_str()
      ->check(CLI::IsMember({"psk", "off"}));
  CLI11_PARSE(app, argc, argv);
  if (std::getenv("STRATA_LOG_LEVEL") == nullptr) SetLogLevel("warn");  // no per-step info lines

  Scratch scratch{JoinPath(tmpfs, "strata-bench-" + std::to_string(::getpid()))};
  std::error_code ec;
  if (!std::filesystem::create_directories(scratch.path, ec)) {
    std::fprintf(stderr, "agent_bench: create %s: %s\n", scratch.path.c_str(),
                 ec ? ec.message().c_str() : "exists");
    return 1;
  }
  b.scratch = scratch.path;
  b.secret = "agent-bench-secret-0123456789abc";  // 32 characters
  b.tls_mode = *net::ParseTlsMode(tls);
  net::TlsOptions tls_options;
  tls_options.mode = b.tls_mode;
  StatusOr<net::Trust> trust = net::MakeTrust(b.secret, tls_options);
  if (!trust.ok()) {
    std::fprintf(stderr, "agent_bench: %s\n", trust.status().message().c_str());
    return 1;
  }
  b.trust = *trust;
  int rc = 1;
  Status s = SetUpAndRun(b, size_mib * kMiB, only, &rc);
  if (!s.ok()) std::fprintf(stderr, "agent_bench: %s\n", s.message().c_str());
  return s.ok() ? rc : 1;
}

}  // namespace
}  // namespace strata::agent_bench

int main(int argc, char** argv) { return strata::agent_bench::Main(argc, argv); }
