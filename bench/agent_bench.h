// Copyright 2026 The Strata Authors.
//
// What agent_bench's benchmarks share (bench/agent_bench.cc has what each
// measures): a real Strata step in a sender's store, a live in-process agent
// to replicate to and restore from, the raw TCP baselines, and the timed
// transfers themselves.
#ifndef STRATA_BENCH_AGENT_BENCH_H_
#define STRATA_BENCH_AGENT_BENCH_H_

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "agent/agent.h"
#include "agent/store/store.h"
#include "bench_util.h"
#include "net/tls.h"
#include "strata/status.h"
#include "util/thread_pool.h"
#include "wire/data.h"

namespace strata::agent_bench {

using bench::Samples;

inline constexpr size_t kRawIoBytes = 1 << 20;  // bytes per send/recv/pread/pwrite call
inline constexpr char kJob[] = "bench";

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  int get() const { return fd_; }

 private:
  int fd_;
};

// Writes `state` (bytes long, split into 4 float32 tensors of 4 KiB rows) as
// step 1 with a sync Checkpointer, so it is committed when Save returns;
// returns the step's directory.
StatusOr<std::string> WriteCheckpoint(const std::string& dir, const std::byte* state,
                                      uint64_t bytes);

// --- Raw TCP baselines (1 MiB socket buffers, 1 MiB send/recv calls) ---

// What a raw transfer reads and where it puts the bytes.
struct RawEnds {
  std::byte* src = nullptr;  // send from memory, or
  int src_fd = -1;           // pread from this file, then send
  int dst_fd = -1;           // pwrite into this file; -1: drop (iperf3)
};

// One transfer between two threads; seconds from connect to ack.
StatusOr<double> RawTransfer(const RawEnds& ends, uint64_t bytes);
// file -> file: pread+send into recv+pwrite of a new file on the tmpfs.
StatusOr<double> RawToNewFile(int src_fd, const std::string& dst, uint64_t bytes);
Status WritePayload(const std::string& path, const std::byte* data, uint64_t n);

// --- The agents' side ---

// An agent running in this process as `strata agent` runs it: Start(), then
// Run() on its own thread until stopped. It serves kJob as node 1 of 2 (a
// replicator.yaml in `dir`; the start never completes, as node 0 never
// comes), so that it takes the sender's steps (rank 0) as a peer's: an
// agent takes put_step only for a job it serves.
class LiveAgent {
 public:
  static StatusOr<std::unique_ptr<LiveAgent>> Start(const std::string& dir,
                                                    const std::string& secret, net::TlsMode tls);

  ~LiveAgent() {
    stop_ = true;
    if (loop_.joinable()) loop_.join();
    if (!run_status_.ok()) std::fprintf(stderr, "agent: %s\n", run_status_.message().c_str());
    agent_.reset();  // before stop_, which its threads may read
  }
  agent::Endpoint endpoint() const { return agent_->listen_endpoint(); }
  agent::Store* store() { return agent_->store_for_testing(); }

 private:
  std::unique_ptr<agent::Agent> agent_;
  std::atomic<bool> stop_{false};
  Status run_status_;
  std::thread loop_;
};

// A Store of its own, as an agent has (same pool size).
struct Node {
  std::string dir;
  ThreadPool pool{ThreadPool::DefaultThreads() - 1};
  std::unique_ptr<agent::Store> store = nullptr;
};

struct Bench {
  uint64_t bytes = 0;  // of the step: data files and manifest
  int reps = 0;
  int streams = agent::AgentConfig().data_streams;  // the agent's default
  std::string scratch;
  std::string secret;
  net::TlsMode tls_mode = net::TlsMode::kPsk;
  net::Trust trust;              // as the agents run: --tls
  std::byte* payload = nullptr;  // `bytes` bytes, for the memory baselines
  int payload_fd = -1;           // a file with them, for the file baselines
  Node* sender = nullptr;        // holds the step as `key`
  wire::StepKey key;
  StepIndex index;
  LiveAgent* peer = nullptr;
  std::string peer_dir;                  // its local directory
  int64_t next_step = 1000;              // replicas get new step numbers: never "have"
  std::optional<wire::StepKey> replica;  // the newest copy `peer` holds
};

// Records a timing, or passes its failure on.
inline Status AddTo(Samples* s, const StatusOr<double>& seconds) {
  if (seconds.ok()) s->Add(*seconds);
  return seconds.status();
}

// A transfer's phases: connect+auth+call, the data, what follows until done.
struct Phases {
  double call = 0, data = 0, finish = 0, total = 0;
};
struct PhaseSamples {
  Samples call, data, finish, total;
  void Add(const Phases& p) {
    call.Add(p.call);
    data.Add(p.data);
    finish.Add(p.finish);
    total.Add(p.total);
  }
};

// Replication's sequence (Replication::SendToPeer), announcing the
// sender's step as `as`: put_step offering dedup with the manifest's ranges,
// then the ranges the peer asks for, then its ack.
StatusOr<Phases> PutStep(const Bench& b, const wire::StepKey& as);
// Replicates the step to the peer under a new step number, removing the
// peer's previous replica first (outside the timing).
StatusOr<Phases> ReplicateOnce(Bench& b);

// Agent::FetchFrom against the live agent, into `node`'s store, over
// `streams` connections.
StatusOr<Phases> FetchStep(const Bench& b, Node& node, const wire::StepKey& key, int streams);
// A replaced node: no copy, no spare files.
Status EmptyNode(Node& node, const wire::StepKey& key);
// Fetches `key` into the emptied node and checks what arrived.
Status TimedFetch(const Bench& b, Node& node, const wire::StepKey& key, int streams,
                  PhaseSamples* into);

// The benchmarks (agent_bench.cc; tls_cost in agent_bench_tls.cc).
Status BenchPeerReplication(Bench& b);
Status BenchRestoreFromPeer(Bench& b);
Status BenchRestartCheck(Bench& b);
Status BenchTlsCost(Bench& b);

}  // namespace strata::agent_bench

#endif  // STRATA_BENCH_AGENT_BENCH_H_
