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
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/rpc/client.h"
#include "agent/rpc/step_stream.h"
#include "agent/rpc/transfer.h"
#include "agent/store/dedup.h"
#include "agent/store/ram_disk.h"
#include "agent/store/store.h"
#include "bench_util.h"
#include "format/naming.h"
#include "net/frame.h"
#include "strata/checkpointer.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/thread_pool.h"
#include "wire/data.h"

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

constexpr int kRawSocketBuffer = 1 << 20;  // SO_SNDBUF / SO_RCVBUF of the raw baselines
constexpr size_t kRawIoBytes = 1 << 20;    // bytes per send/recv/pread/pwrite call
constexpr char kJob[] = "bench";

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

// --- The step: a real Strata checkpoint ---

// Writes `state` (bytes long, split into 4 float32 tensors of 4 KiB rows) as
// step 1 with a sync Checkpointer, so it is committed when Save returns.
StatusOr<std::string> WriteCheckpoint(const std::string& dir, const std::byte* state,
                                      uint64_t bytes) {
  constexpr int kPercent[] = {40, 30, 20};  // the last tensor takes the rest
  const int64_t rows = static_cast<int64_t>(bytes / 4096);
  std::vector<Item> items;
  int64_t used = 0;
  for (int i = 0; i < 4; ++i) {
    int64_t r = i < 3 ? rows * kPercent[i] / 100 : rows - used;
    Item it{"tensor." + std::to_string(i), DType::kFloat32, {r, 1024}, state + used * 4096, 0};
    it.size = static_cast<uint64_t>(r) * 4096;
    items.push_back(std::move(it));
    used += r;
  }
  CheckpointerOptions o;
  o.async = false;
  o.max_to_keep = 0;
  o.preemption_signals = {};
  STRATA_ASSIGN_OR_RETURN(auto ckpt, Checkpointer::Open(dir, o));
  STRATA_RETURN_IF_ERROR(ckpt->Save(1, items).status());
  return JoinPath(dir, StepDirName(1));
}

// --- Raw TCP baselines ---

// Sends (`out`) or receives exactly n bytes on a blocking socket.
Status AllRaw(bool out, int fd, std::byte* p, size_t n) {
  while (n > 0) {
    ssize_t r = out ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoToStatus(errno, out ? "raw send" : "raw recv");
    if (r == 0) return UnavailableError("raw recv: connection closed");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

// What a raw transfer reads and where it puts the bytes.
struct RawEnds {
  std::byte* src = nullptr;  // send from memory, or
  int src_fd = -1;           // pread from this file, then send
  int dst_fd = -1;           // pwrite into this file; -1: drop (iperf3)
};

Status SetRawBuffers(int fd) {
  int b = kRawSocketBuffer;
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b) != 0) {
    return ErrnoToStatus(errno, "setsockopt");
  }
  return Status::Ok();
}

// A listening socket on 127.0.0.1, an ephemeral port.
StatusOr<UniqueFd> RawListen(sockaddr_in* addr) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoToStatus(errno, "socket");
  STRATA_RETURN_IF_ERROR(SetRawBuffers(fd.get()));  // inherited by the accepted socket
  *addr = {};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(addr), sizeof *addr) != 0 ||
      ::listen(fd.get(), 1) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(addr), &len) != 0) {
    return ErrnoToStatus(errno, "raw listen");
  }
  return fd;
}

// Accepts one connection, receives `bytes` and answers with one ack byte.
Status RawReceive(int listen_fd, const RawEnds& ends, uint64_t bytes) {
  UniqueFd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "accept");
  auto buf = std::make_unique_for_overwrite<std::byte[]>(kRawIoBytes);
  for (uint64_t off = 0; off < bytes;) {
    size_t n = std::min<uint64_t>(kRawIoBytes, bytes - off);
    STRATA_RETURN_IF_ERROR(AllRaw(false, fd.get(), buf.get(), n));
    if (ends.dst_fd >= 0 &&
        ::pwrite(ends.dst_fd, buf.get(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
      return ErrnoToStatus(errno, "pwrite");
    }
    off += n;
  }
  std::byte ack{1};
  return AllRaw(true, fd.get(), &ack, 1);
}

// Connects, sends `bytes` and waits for the receiver's ack byte.
Status RawSend(const sockaddr_in& to, const RawEnds& ends, uint64_t bytes) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoToStatus(errno, "socket");
  STRATA_RETURN_IF_ERROR(SetRawBuffers(fd.get()));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    return ErrnoToStatus(errno, "connect");
  }
  auto buf = std::make_unique_for_overwrite<std::byte[]>(kRawIoBytes);
  for (uint64_t off = 0; off < bytes;) {
    size_t n = std::min<uint64_t>(kRawIoBytes, bytes - off);
    std::byte* p = ends.src + off;
    if (ends.src_fd >= 0) {
      if (::pread(ends.src_fd, buf.get(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
        return ErrnoToStatus(errno, "pread");
      }
      p = buf.get();
    }
    STRATA_RETURN_IF_ERROR(AllRaw(true, fd.get(), p, n));
    off += n;
  }
  std::byte ack;
  return AllRaw(false, fd.get(), &ack, 1);
}

// One transfer between two threads; seconds from connect to ack.
StatusOr<double> RawTransfer(const RawEnds& ends, uint64_t bytes) {
  sockaddr_in addr;
  STRATA_ASSIGN_OR_RETURN(UniqueFd listener, RawListen(&addr));
  Status received;
  std::thread receiver([&] { received = RawReceive(listener.get(), ends, bytes); });
  Clock::time_point t0 = Clock::now();
  Status sent = RawSend(addr, ends, bytes);
  double seconds = SecondsSince(t0);
  if (!sent.ok()) ::shutdown(listener.get(), SHUT_RDWR);  // unblocks accept
  receiver.join();
  STRATA_RETURN_IF_ERROR(sent);
  STRATA_RETURN_IF_ERROR(received);
  return seconds;
}

// file -> file: pread+send into recv+pwrite of a new file on the tmpfs.
StatusOr<double> RawToNewFile(int src_fd, const std::string& dst, uint64_t bytes) {
  UniqueFd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (out.get() < 0) return ErrnoToStatus(errno, "create " + dst);
  auto seconds = RawTransfer({.src_fd = src_fd, .dst_fd = out.get()}, bytes);
  ::unlink(dst.c_str());
  return seconds;
}

Status WritePayload(const std::string& path, const std::byte* data, uint64_t n) {
  return WriteFileAtomic(Env::Default(), path, {reinterpret_cast<const char*>(data), n});
}

// --- The agents' side ---

// An agent running in this process as `strata agent` runs it: Start(), then
// Run() on its own thread until stopped.
class LiveAgent {
 public:
  static StatusOr<std::unique_ptr<LiveAgent>> Start(const std::string& dir,
                                                    const std::string& secret, net::TlsMode tls) {
    AgentConfig config;
    config.local_dir = dir;
    config.listen = {"127.0.0.1", 0};  // port 0: any free port, see endpoint()
    config.advertise = {"127.0.0.1", 0};
    config.secret = secret;
    config.tls.mode = tls;
    auto live = std::make_unique<LiveAgent>();
    STRATA_ASSIGN_OR_RETURN(live->agent_, agent::Agent::Start(std::move(config)));
    live->loop_ = std::thread([p = live.get()] { p->run_status_ = p->agent_->Run(p->stop_); });
    return live;
  }
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
  int streams = AgentConfig().data_streams;  // the agent's default
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
Status AddTo(Samples* s, const StatusOr<double>& seconds) {
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
// then the ranges the peer asks for, in its groups (one on this connection,
// more on put_files connections), then its ack.
StatusOr<Phases> PutStep(const Bench& b, const wire::StepKey& as) {
  Phases t;
  const agent::Endpoint to = b.peer->endpoint();
  Clock::time_point t0 = Clock::now();
  STRATA_ASSIGN_OR_RETURN(agent::RpcClient client,
                          agent::RpcClient::Connect(to, b.trust, "node 0"));
  wire::PutStepRequest put{as, b.index, 1, true, std::nullopt};
  STRATA_ASSIGN_OR_RETURN(put.ranges, agent::HeldRanges(*b.sender->store, b.key, b.index));
  STRATA_ASSIGN_OR_RETURN(json answer, client.Call(put.ToJson(), std::chrono::seconds(30)));
  STRATA_ASSIGN_OR_RETURN(wire::PutStepReady ready, wire::PutStepReady::FromJson(answer));
  if (ready.have) return FailedPreconditionError("the peer took no ranges");
  if (!ready.need) {
    t.call = SecondsSince(t0);
    STRATA_RETURN_IF_ERROR(
        agent::SendStepFiles(client.socket(), b.sender->store->StepPath(b.key), b.index));
    t.data = SecondsSince(t0) - t.call;
    STRATA_RETURN_IF_ERROR(agent::AwaitCommitted(client.socket(), to.ToString()));
    t.total = SecondsSince(t0);
    t.finish = t.total - t.call - t.data;
    return t;
  }
  t.call = SecondsSince(t0);
  const std::string dir = b.sender->store->StepPath(b.key);
  const auto& need = *ready.need;
  if (need.size() == 1) {
    STRATA_RETURN_IF_ERROR(agent::SendRanges(client.socket(), dir, b.index, need[0]));
  } else if (need.size() > 1) {
    auto group = [&](size_t g, const std::atomic<bool>&) -> Status {
      STRATA_ASSIGN_OR_RETURN(agent::RpcClient c, agent::RpcClient::Connect(to, b.trust, "node 0"));
      STRATA_RETURN_IF_ERROR(
          c.Call(wire::PutFilesRequest{*ready.transfer, {}, g}.ToJson(), std::chrono::seconds(30))
              .status());
      STRATA_RETURN_IF_ERROR(agent::SendRanges(c.socket(), dir, b.index, need[g]));
      return agent::AwaitCommitted(c.socket(), to.ToString());
    };
    Status sent = RunParallel(need.size(), need.size(), group);
    if (!sent.ok()) return sent;
  }
  t.data = SecondsSince(t0) - t.call;
  STRATA_RETURN_IF_ERROR(agent::AwaitCommitted(client.socket(), to.ToString()));
  t.total = SecondsSince(t0);
  t.finish = t.total - t.call - t.data;
  return t;
}

// Replicates the step to the peer under a new step number. The peer's
// previous replica is removed first through its store, as its garbage
// collection does in a running job (outside the timing; the GC itself needs
// a job), so tmpfs use stays at one copy plus the spare files the next
// transfer reuses: the steady state of a job that saves every few minutes.
StatusOr<Phases> ReplicateOnce(Bench& b) {
  if (b.replica) {
    STRATA_RETURN_IF_ERROR(b.peer->store()->Remove(*b.replica));
    b.replica.reset();
  }
  wire::StepKey as{kJob, 0, b.next_step++};
  STRATA_ASSIGN_OR_RETURN(Phases t, PutStep(b, as));
  b.replica = as;
  return t;
}

// --- peer_replication ---

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

// Agent::FetchFrom against the live agent, into `node`'s store, over
// `streams` connections: data = connect, get_index, manifest and data,
// verified as it arrives (FetchCopy); finish = the commit (AdoptCopy).
StatusOr<Phases> FetchStep(const Bench& b, Node& node, const wire::StepKey& key, int streams) {
  Phases t;
  Clock::time_point t0 = Clock::now();
  STRATA_ASSIGN_OR_RETURN(
      agent::FetchedCopy copy,
      agent::FetchCopy(b.peer->endpoint(), b.trust, "node 0", key, streams, node.store.get()));
  t.data = SecondsSince(t0);
  if (!copy.data_verified) return InternalError("the fetch was not verified on arrival");
  STRATA_RETURN_IF_ERROR(agent::AdoptCopy(node.store.get(), key, copy));
  t.total = SecondsSince(t0);
  t.finish = t.total - t.data;
  return t;
}

struct RestoreSamples {
  Samples mem, verify;
  PhaseSamples fetch, one_stream;
};

// A replaced node: no copy, no spare files.
Status EmptyNode(Node& node, const wire::StepKey& key) {
  if (node.store->Has(key)) STRATA_RETURN_IF_ERROR(node.store->Remove(key));
  node.store->DropSpare();
  return Status::Ok();
}

// Fetches `key` into the emptied node and checks what arrived.
Status TimedFetch(const Bench& b, Node& node, const wire::StepKey& key, int streams,
                  PhaseSamples* into) {
  STRATA_RETURN_IF_ERROR(EmptyNode(node, key));
  STRATA_ASSIGN_OR_RETURN(Phases f, FetchStep(b, node, key, streams));
  STRATA_ASSIGN_OR_RETURN(StepIndex got, node.store->GetIndex(key));
  if (got.digest != b.index.digest) return DataLossError("restored a different step");
  into->Add(f);
  return Status::Ok();
}

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

// --- tls_cost ---

// The TLS channel alone: `bytes` from memory to memory over one TLS 1.3
// connection (net::Socket, as the agents use it) between two threads, in
// 1 MiB sends and receives; seconds from connect to the last byte.
StatusOr<double> TlsTransfer(const Bench& b, std::byte* dst) {
  STRATA_ASSIGN_OR_RETURN(net::Socket listener, net::Socket::Listen("127.0.0.1", 0, 4));
  STRATA_ASSIGN_OR_RETURN(uint16_t port, listener.LocalPort());
  const net::Deadline deadline = net::DeadlineAfter(std::chrono::seconds(60));
  Status received;
  std::thread receiver([&] {
    auto s = listener.Accept(std::chrono::seconds(10));
    if (!s.ok()) {
      received = s.status();
      return;
    }
    received = s->StartTls(b.trust.tls, net::TlsStream::Role::kServer, "", deadline);
    for (uint64_t off = 0; received.ok() && off < b.bytes; off += kRawIoBytes) {
      received = s->RecvAll(dst + off, std::min<uint64_t>(kRawIoBytes, b.bytes - off), deadline);
    }
  });
  Clock::time_point t0 = Clock::now();
  Status sent = [&]() -> Status {
    STRATA_ASSIGN_OR_RETURN(net::Socket s,
                            net::Socket::Connect("127.0.0.1", port, std::chrono::seconds(10)));
    STRATA_RETURN_IF_ERROR(s.StartTls(b.trust.tls, net::TlsStream::Role::kClient, "", deadline));
    for (uint64_t off = 0; off < b.bytes; off += kRawIoBytes) {
      STRATA_RETURN_IF_ERROR(
          s.SendAll(b.payload + off, std::min<uint64_t>(kRawIoBytes, b.bytes - off), deadline));
    }
    return Status::Ok();
  }();
  receiver.join();
  const double seconds = SecondsSince(t0);
  STRATA_RETURN_IF_ERROR(sent);
  STRATA_RETURN_IF_ERROR(received);
  return seconds;
}

// Replication and a restore against an agent with TLS off (`plain`) and the
// bench's own (TLS on), alternating within each repetition.
struct TlsSamples {
  Samples mem, tls_mem;
  PhaseSamples put_tls, put_plain, fetch_tls, fetch_plain, one_tls, one_plain;
};

Status TlsRep(Bench& b, Bench& plain, Node& node, std::byte* dst, TlsSamples* s) {
  STRATA_RETURN_IF_ERROR(AddTo(&s->mem, RawTransfer({.src = b.payload}, b.bytes)));
  STRATA_RETURN_IF_ERROR(AddTo(&s->tls_mem, TlsTransfer(b, dst)));
  STRATA_ASSIGN_OR_RETURN(Phases put, ReplicateOnce(b));
  s->put_tls.Add(put);
  STRATA_ASSIGN_OR_RETURN(put, ReplicateOnce(plain));
  s->put_plain.Add(put);
  STRATA_RETURN_IF_ERROR(TimedFetch(b, node, *b.replica, b.streams, &s->fetch_tls));
  STRATA_RETURN_IF_ERROR(TimedFetch(plain, node, *plain.replica, b.streams, &s->fetch_plain));
  STRATA_RETURN_IF_ERROR(TimedFetch(b, node, *b.replica, 1, &s->one_tls));
  return TimedFetch(plain, node, *plain.replica, 1, &s->one_plain);
}

// `b` against a live agent of its own with TLS as `mode` says.
StatusOr<std::unique_ptr<LiveAgent>> WithAgent(const Bench& b, net::TlsMode mode, Bench* with) {
  *with = b;
  with->peer_dir = JoinPath(b.scratch, std::string("peer-") + std::string(net::TlsModeName(mode)));
  net::TlsOptions options;
  options.mode = mode;
  STRATA_ASSIGN_OR_RETURN(with->trust, net::MakeTrust(b.secret, options));
  STRATA_ASSIGN_OR_RETURN(auto agent, LiveAgent::Start(with->peer_dir, b.secret, mode));
  with->peer = agent.get();
  with->replica.reset();
  return agent;
}

Status BenchTlsCost(Bench& b) {
  std::printf(
      "\n[tls_cost] put_step and a restore (data-streams %d and 1) with TLS 1.3 (psk) and with "
      "TLS off, alternating, vs raw TCP and a TLS connection alone, loopback\n",
      b.streams);
  Bench tls, plain;
  STRATA_ASSIGN_OR_RETURN(auto tls_agent, WithAgent(b, net::TlsMode::kPsk, &tls));
  STRATA_ASSIGN_OR_RETURN(auto plain_agent, WithAgent(b, net::TlsMode::kOff, &plain));
  Node node{JoinPath(b.scratch, "restoring-tls")};
  STRATA_ASSIGN_OR_RETURN(node.store, agent::Store::Open(node.dir, &node.pool));
  std::vector<uint64_t> landing(b.bytes / sizeof(uint64_t) + 1);
  auto* dst = reinterpret_cast<std::byte*>(landing.data());
  TlsSamples warmup, s;
  STRATA_RETURN_IF_ERROR(TlsRep(tls, plain, node, dst, &warmup));
  for (int r = 0; r < b.reps; ++r) STRATA_RETURN_IF_ERROR(TlsRep(tls, plain, node, dst, &s));
  PrintSamples("baseline: raw mem->mem (1 MiB bufs)", s.mem, b.bytes);
  PrintSamples("baseline: TLS 1.3 mem->mem (net::Socket)", s.tls_mem, b.bytes);
  PrintSamples("plaintext: put_step connect->ack", s.put_plain.total, b.bytes);
  PrintSamples("tls: put_step connect->ack", s.put_tls.total, b.bytes);
  PrintSamples("  tls: connect+TLS+auth+put_step call", s.put_tls.call, 0);
  PrintSamples("  plaintext: connect+auth+put_step call", s.put_plain.call, 0);
  PrintSamples("plaintext: restore from peer", s.fetch_plain.total, b.bytes);
  PrintSamples("tls: restore from peer", s.fetch_tls.total, b.bytes);
  PrintSamples("plaintext: restore over 1 stream", s.one_plain.total, b.bytes);
  PrintSamples("tls: restore over 1 stream", s.one_tls.total, b.bytes);
  // Connections: what a job's start (every node registers) and every
  // transfer pay before their first byte.
  constexpr int kConnections = 200;
  for (const Bench* side : {&plain, &tls}) {
    Clock::time_point t0 = Clock::now();
    for (int i = 0; i < kConnections; ++i) {
      STRATA_RETURN_IF_ERROR(
          agent::RpcClient::Connect(side->peer->endpoint(), side->trust, "node 0").status());
    }
    std::printf("  %s: connect+%sauthenticate, %d in a row  %8.3f ms each\n",
                side == &tls ? "tls" : "plaintext", side == &tls ? "TLS+" : "", kConnections,
                SecondsSince(t0) * 1000 / kConnections);
  }
  // What TLS costs, for the record; what the data path adds to TLS itself,
  // against a target.
  PrintRatio("tls_replication", s.put_plain.total.Median() / s.put_tls.total.Median(), "");
  PrintRatio("tls_restore", s.fetch_plain.total.Median() / s.fetch_tls.total.Median(), "");
  PrintRatio("tls_replication_vs_raw", s.mem.Median() / s.put_tls.total.Median(), "");
  PrintRatio("tls_replication_vs_tls_channel", s.tls_mem.Median() / s.put_tls.total.Median(),
             "0.75");
  PrintRatio("tls_restore_vs_tls_channel", s.tls_mem.Median() / s.fetch_tls.total.Median(), "0.6");
  return Status::Ok();
}

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
  const agent::RamDisk disk = agent::DescribeRamDisk(b.scratch);
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
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
