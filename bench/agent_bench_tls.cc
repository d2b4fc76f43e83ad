// Copyright 2026 The Strata Authors.
//
// agent_bench's tls_cost: replication and a restore against an agent with
// TLS 1.3 (psk) and one with TLS off, alternating, next to the raw socket
// and a TLS connection alone (see agent_bench.cc).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/rpc/client.h"
#include "agent_bench.h"
#include "net/socket.h"
#include "util/file_util.h"

namespace strata::agent_bench {
namespace {

using bench::Clock;
using bench::PrintRatio;
using bench::PrintSamples;
using bench::SecondsSince;

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

}  // namespace

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

}  // namespace strata::agent_bench
