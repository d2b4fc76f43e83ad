// Copyright 2026 The Strata Authors.
//
// agent_bench's shared parts (agent_bench.h): the step, the raw baselines,
// the timed replication and fetch.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "agent/rpc/client.h"
#include "agent/rpc/step_stream.h"
#include "agent/rpc/transfer.h"
#include "agent/store/dedup.h"
#include "agent_bench.h"
#include "format/naming.h"
#include "strata/checkpointer.h"
#include "util/file_util.h"

namespace strata::agent_bench {
namespace {

using agent::json;
using bench::Clock;
using bench::SecondsSince;

constexpr int kRawSocketBuffer = 1 << 20;  // SO_SNDBUF / SO_RCVBUF of the raw baselines

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

}  // namespace

StatusOr<std::unique_ptr<LiveAgent>> LiveAgent::Start(const std::string& dir,
                                                      const std::string& secret, net::TlsMode tls) {
  agent::AgentConfig config;
  config.local_dir = dir;
  config.listen = {"127.0.0.1", 0};  // port 0: any free port, see endpoint()
  config.advertise = {"127.0.0.1", 0};
  config.secret = secret;
  config.tls.mode = tls;
  auto live = std::make_unique<LiveAgent>();
  STRATA_ASSIGN_OR_RETURN(live->agent_, agent::Agent::Start(std::move(config)));
  live->loop_ = std::thread([p = live.get()] { p->run_status_ = p->agent_->Run(p->stop_); });
  // Its own coordinator (every agent runs one; rank 0's is the job's) waits
  // for node 0 to register.
  STRATA_RETURN_IF_ERROR(WriteFileAtomic(
      Env::Default(), JoinPath(dir, "replicator.yaml"),
      std::string("job-name: ") + kJob + "\nframework: orbax\nnode-rank: 1\nnodes: 2\nmaster: " +
          live->endpoint().ToString() + "\n"));
  // Serving once its start began (the restore of the job's step).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!live->agent_->StatusReport().restore_state) {
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceededError("the agent in " + dir + " did not start serving job " + kJob +
                                   " within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return live;
}

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

Status EmptyNode(Node& node, const wire::StepKey& key) {
  if (node.store->Has(key)) STRATA_RETURN_IF_ERROR(node.store->Remove(key));
  node.store->DropSpare();
  return Status::Ok();
}

Status TimedFetch(const Bench& b, Node& node, const wire::StepKey& key, int streams,
                  PhaseSamples* into) {
  STRATA_RETURN_IF_ERROR(EmptyNode(node, key));
  STRATA_ASSIGN_OR_RETURN(Phases f, FetchStep(b, node, key, streams));
  STRATA_ASSIGN_OR_RETURN(StepIndex got, node.store->GetIndex(key));
  if (got.digest != b.index.digest) return DataLossError("restored a different step");
  into->Add(f);
  return Status::Ok();
}

}  // namespace strata::agent_bench
