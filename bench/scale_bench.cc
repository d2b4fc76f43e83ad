// Copyright 2026 The Strata Authors.
//
// The control plane at scale: the real Coordinator behind the real agent
// Server, in a child process of its own (scale_bench_coordinator.cc), on
// 127.0.0.1, driven over real loopback sockets by N simulated agents that
// speak the agent's protocol (HMAC handshake, framed JSON calls) — all of
// them on one event-loop thread of this process, each from a loopback
// address of its own (127.x.y.z), as N nodes would come from N hosts. Like
// the agent (RpcPool), a simulated agent keeps one connection to the
// coordinator for its registration, plan and ready calls, opens a new one
// when it cannot make a call, retrying with the agent's backoff (jittered,
// 0.2 s doubling to 5 s: Restore::BackOff), and sends the agent's fields
// with the agent's waits (the coordinator's default for the plan and the
// barrier, 10 s for the sync long-poll); its sync long-poll and its
// replication reports keep one connection each.
//
// Each round begins with every agent connecting anew, all at once (as
// after a restart of every agent): that part is timed on its own, since
// its cost is the TCP and authentication handshakes of N connections at
// once and the server's handshake budget turning most of the first ones
// away, not the coordinator's round. For each N (--nodes, default
// 100,1000,10000) one line:
//
//   scale nodes=N connect_s=… fresh_round_s=… restart_round_s=…
//         node_loss_round_s=… sync_decision_ms=… reports_per_s=…
//         coordinator_rss_mib=…
//
//   connect_s          every node opening its connection at once -> the
//                      last one authenticated (before the fresh round)
//   fresh_round_s      first registration sent -> the last node told "go";
//                      nothing held anywhere
//   restart_round_s    the same, every node restarted (new incarnation) and
//                      holding its own step and its left neighbour's copy
//   node_loss_round_s  the same, node N/2 restarted empty (its plan must
//                      name its right neighbour as the holder)
//   sync_decision_ms   node 0's notice sent -> every node's sync long-poll
//                      answered with the decided step (the nodes report
//                      their progress in between)
//   reports_per_s      "replicated" reports answered per second, every node
//                      reporting back to back for --report-seconds
//   coordinator_rss_mib the coordinator process's peak resident memory
//
// Per round kind, a line `scale-detail nodes=N round=…`: where the round's
// time went, as successive phases that add up to it,
//
//   registration_s     first registration sent -> the coordinator answered
//                      the last one (it made the plan in that call)
//   planning_s         -> the last node received its plan
//   restore_reports_s  -> the coordinator received the last "ready"
//   go_s               -> the last node heard "go"
//
// plan_ms (the coordinator's time in the call that completed the
// registrations: the plan and waking every waiting node), the CPU seconds
// the coordinator process (coordinator_cpu_s) and the simulated fleet
// (fleet_cpu_s) spent (on 2 cores the two share them: a round takes at
// least the larger and, with the machine to themselves, at most about
// their sum), and what it cost on the wire (calls, handshakes, retries,
// bytes); and a line `scale-connect nodes=N round=…` with its connect
// phase: connect_s, the CPU of both sides, handshakes and retries; and a
// line `scale-sync nodes=N` with the sync decision's CPU (the
// coordinator's; its busiest thread's, which bounds the decision with the
// coordinator on cores of its own; the fleet's) and calls. The
// coordinator's marks come through a page both processes share (both read
// CLOCK_MONOTONIC). Every plan is checked (step, holder) and a wrong one
// fails the run. Targets at N = 10,000 on 2 cores: every round <= 3 s, the
// sync decision <= 0.5 s, the coordinator <= 1 GiB (docs/agent-design.md,
// "Scale"; docs/performance.md).
#include "scale_bench.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "agent/rpc/client.h"
#include "net/auth.h"
#include "net/frame.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/process.h"
#include "wire/coordination.h"
#include "wire/json.h"
#include "wire/op.h"

namespace strata {
namespace {

using agent::json;
using asio::ip::tcp;
using ErrorCode = asio::error_code;
using scale_bench::BusiestThreadSeconds;
using scale_bench::Clock;
using scale_bench::CoordinatorMarks;
using scale_bench::CoordinatorProcess;
using scale_bench::FromNanos;
using scale_bench::kSecret;
using scale_bench::OwnCpuSeconds;
using scale_bench::Seconds;

constexpr char kJob[] = "scale";
constexpr int64_t kStep = 100;

// ---------------------------------------------------------------------------
// Simulated agents.

struct Wire {  // what a round costs on the wire, seen from the clients
  uint64_t calls = 0, handshakes = 0, bytes_out = 0, bytes_in = 0, retries = 0;
};

// Where a round's time went (see the top of the file); seconds.
struct Phases {
  double connect = 0, connect_coordinator_cpu = 0, connect_fleet_cpu = 0;
  double registration = 0, planning = 0, restore_reports = 0, go = 0;
  double plan_ms = 0, coordinator_cpu = 0, fleet_cpu = 0;
};

// A call's request, encoded once: its retries send the same bytes.
using Request = std::shared_ptr<const std::string>;
Request Encode(const json& request) {
  return std::make_shared<const std::string>(net::EncodeFrame(agent::kFrameCall, request.dump()));
}

using Done = std::function<void(StatusOr<json>)>;

// One authenticated connection from `source` to the coordinator: Open, then
// calls one at a time. What is pending (the open, or a call) is held here,
// and each step continues with a member function: a step copies no
// callback.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  using Opened = std::function<void(Status)>;
  Conn(asio::io_context& io, tcp::endpoint to, asio::ip::address source, Wire* wire)
      : socket_(io), to_(to), source_(source), wire_(wire) {}

  void Open(Opened opened) {
    opened_ = std::move(opened);
    ErrorCode ec;
    socket_.open(tcp::v4(), ec);
    if (!ec) socket_.bind(tcp::endpoint(source_, 0), ec);
    if (ec) return Fail(UnavailableError("socket: " + ec.message()));
    socket_.async_connect(to_, [self = shared_from_this()](ErrorCode e) {
      if (e) return self->Fail(UnavailableError("connect: " + e.message()));
      self->socket_.set_option(tcp::no_delay(true), e);
      self->Hello();
    });
  }

  void Call(const Request& request, Done done) {
    ++wire_->calls;
    done_ = std::move(done);
    Send(request, &Conn::AwaitReply);
  }

  void Close() {
    ErrorCode ignored;
    socket_.close(ignored);
  }

 private:
  using Step = void (Conn::*)();

  void Hello() {
    ++wire_->handshakes;
    handshake_.emplace(kSecret, "bench", "coordinator");
    auto hello = handshake_->Hello();
    if (!hello.ok()) return Fail(hello.status());
    Send(std::make_shared<const std::string>(net::EncodeFrame(net::kFrameHello, *hello)),
         &Conn::AwaitChallenge);
  }
  void AwaitChallenge() { Recv(net::kMaxAuthPayload, &Conn::OnChallenge); }
  void OnChallenge() {
    std::string refusal;
    auto proof = handshake_->OnChallenge(in_, &refusal);
    if (!proof.ok()) return Fail(proof.status());
    Send(std::make_shared<const std::string>(net::EncodeFrame(net::kFrameProof, *proof)),
         &Conn::AwaitOk);
  }
  void AwaitOk() { Recv(net::kMaxAuthPayload, &Conn::OnOk); }
  void OnOk() {
    Status s = handshake_->OnOk(in_);
    handshake_.reset();
    Opened opened = std::exchange(opened_, nullptr);
    opened(s);
  }

  void AwaitReply() { Recv(agent::kMaxControlBytes, &Conn::OnReply); }
  void OnReply() {
    Done done = std::exchange(done_, nullptr);
    json reply = json::parse(in_.payload, nullptr, false);
    if (reply.is_discarded()) return done(DataLossError("unparsable reply"));
    if (!reply.value("ok", false)) return done(wire::StatusFromJson(reply, "coordinator"));
    done(std::move(reply));
  }

  // Ends what is pending with `s`; nothing when nothing is (a closed
  // connection's operations end too).
  void Fail(Status s) {
    if (opened_) return std::exchange(opened_, nullptr)(s);
    if (done_) return std::exchange(done_, nullptr)(s);
  }

  void Send(Request bytes, Step then) {
    wire_->bytes_out += bytes->size();
    out_ = std::move(bytes);
    asio::async_write(socket_, asio::buffer(*out_),
                      [self = shared_from_this(), then](ErrorCode ec, size_t) {
                        if (ec) return self->Fail(UnavailableError("send: " + ec.message()));
                        ((*self).*then)();
                      });
  }

  // Receives a frame into in_, then `then`.
  void Recv(uint32_t max, Step then) {
    asio::async_read(
        socket_, asio::buffer(header_),
        [self = shared_from_this(), max, then](ErrorCode ec, size_t) {
          if (ec) return self->Fail(UnavailableError("receive: " + ec.message()));
          uint32_t length = 0;
          self->in_ = net::Frame();
          Status s = net::ParseFrameHeader(self->header_, max, kPeer, &self->in_, &length);
          if (!s.ok()) return self->Fail(s);
          self->wire_->bytes_in += net::kFrameHeaderSize + length;
          if (length == 0) return ((*self).*then)();
          self->in_.payload.resize(length);
          asio::async_read(self->socket_, asio::buffer(self->in_.payload),
                           [self, then](ErrorCode e, size_t) {
                             if (e) return self->Fail(UnavailableError("receive: " + e.message()));
                             ((*self).*then)();
                           });
        });
  }

  static inline const std::string kPeer = "coordinator";
  tcp::socket socket_;
  const tcp::endpoint to_;
  const asio::ip::address source_;
  Wire* const wire_;
  std::optional<net::ClientHandshake> handshake_;
  Opened opened_;  // the open in progress
  Done done_;      // the call in progress
  char header_[net::kFrameHeaderSize];
  net::Frame in_;
  Request out_;
};

class Fleet {
 public:
  Fleet(int nodes, uint16_t port) : nodes_(nodes), to_(asio::ip::make_address("127.0.0.1"), port) {}

  // Node i's own loopback address: 127.1.0.1 and up.
  asio::ip::address Source(int node) const {
    const uint32_t a = (127u << 24) | (1u << 16) | static_cast<uint32_t>(node + 1);
    return asio::ip::address_v4(a);
  }

  // One call on node `node`'s connection to the coordinator (opened when
  // there is none), retried with jittered backoff on a new connection while
  // the call cannot be made or the connection is dropped (the agent's
  // behaviour); a reply, ok or not, ends it.
  void Call(int node, Request request, Done done, int attempt = 0) {
    if (!links_[node]) {
      auto conn = std::make_shared<Conn>(io_, to_, Source(node), &wire_);
      return conn->Open([this, conn, node, request = std::move(request), done = std::move(done),
                         attempt](Status s) mutable {
        if (!s.ok()) return Retry(node, std::move(request), std::move(done), attempt);
        links_[node] = std::move(conn);
        Call(node, std::move(request), std::move(done), attempt);
      });
    }
    auto conn = links_[node];
    conn->Call(request, [this, conn, node, request, done = std::move(done),
                         attempt](StatusOr<json> r) mutable {
      if (!r.ok() && r.status().code() == StatusCode::kUnavailable &&
          r.status().message().find("shutting down") == std::string::npos) {
        conn->Close();
        if (links_[node] == conn) links_[node].reset();
        return Retry(node, std::move(request), std::move(done), attempt);
      }
      done(std::move(r));
    });
  }

  // A round: every node registers (with `inventory(node)`), waits for the
  // plan, checks it with `check(node, plan)` and reports ready until "go".
  // The coordinator's marks and its CPU come from `coordinator`.
  double Round(const std::string& incarnation, const std::function<json(int)>& inventory,
               const std::function<std::string(int, const json&)>& check,
               const CoordinatorProcess& coordinator, Wire* connect_wire, Wire* wire,
               Phases* phases) {
    for (auto& link : links_) {  // restarted agents connect anew
      if (link) link->Close();
      link.reset();
    }
    io_.restart();
    io_.poll();
    // The registrations as the agents have them ready when they start.
    std::vector<Request> registrations(nodes_);
    for (int n = 0; n < nodes_; ++n) {
      registrations[n] = Encode({{"op", wire::OpName(wire::Op::kRegister)},
                                 {"job", kJob},
                                 {"nodes", nodes_},
                                 {"node", n},
                                 {"dp", 1},
                                 {"address", "127.0.0.1:" + std::to_string(9000 + n % 50000)},
                                 {"inventory", inventory(n)},
                                 {"incarnation", incarnation + std::to_string(n)}});
    }
    wire_ = Wire();
    double coordinator_cpu = coordinator.CpuSeconds(), fleet_cpu = OwnCpuSeconds();
    phases->connect = ConnectAll();
    phases->connect_coordinator_cpu = coordinator.CpuSeconds() - coordinator_cpu;
    phases->connect_fleet_cpu = OwnCpuSeconds() - fleet_cpu;
    *connect_wire = wire_;

    wire_ = Wire();
    last_plan_ = last_go_ = Clock::time_point();
    coordinator.marks->Reset();
    check_ = &check;
    gone_ = 0;
    coordinator_cpu = coordinator.CpuSeconds();
    fleet_cpu = OwnCpuSeconds();
    const auto start = Clock::now();
    for (int n = 0; n < nodes_; ++n) {
      Call(n, std::move(registrations[n]), [this, n](StatusOr<json> r) {
        if (!r.ok()) Fail("register of node " + std::to_string(n), r.status());
        auto reply = wire::RegisterReply::FromJson(*r);
        if (!reply.ok()) Fail("register of node " + std::to_string(n), reply.status());
        AwaitPlan(n, reply->round, 0);
      });
    }
    io_.restart();
    while (gone_ < nodes_ && io_.run_one() > 0) {
    }
    const double seconds = Seconds(Clock::now() - start);
    *wire = wire_;
    // The phases end at: the coordinator's last registration, the last plan
    // received, the coordinator's last "ready", the last "go" received.
    const CoordinatorMarks& marks = *coordinator.marks;
    const auto registered = FromNanos(marks.last_register_done.load());
    const auto reported = std::max(last_plan_, FromNanos(marks.last_ready.load()));
    phases->registration = Seconds(registered - start);
    phases->planning = Seconds(last_plan_ - registered);
    phases->restore_reports = Seconds(reported - last_plan_);
    phases->go = Seconds(last_go_ - reported);
    phases->plan_ms = static_cast<double>(marks.longest_register.load()) / 1e6;
    phases->coordinator_cpu = coordinator.CpuSeconds() - coordinator_cpu;
    phases->fleet_cpu = OwnCpuSeconds() - fleet_cpu;
    for (auto& link : links_) {  // the descriptors are needed for what follows
      if (link) link->Close();
      link.reset();
    }
    io_.restart();
    io_.poll();
    std::fprintf(stderr, "scale_bench: nodes=%d round %s: connect %.2f s, round %.2f s\n", nodes_,
                 incarnation.c_str(), phases->connect, seconds);
    return seconds;
  }

  // Every node opens its connection to the coordinator at once (a TCP
  // connection and the handshake, retried with the agent's backoff while
  // the server's handshake budget turns it away). Seconds until all are
  // open.
  double ConnectAll() {
    int open = 0;
    const auto start = Clock::now();
    for (int n = 0; n < nodes_; ++n) {
      OpenWithRetry(n, [this, n, &open](std::shared_ptr<Conn> c) {
        links_[n] = std::move(c);
        ++open;
      });
    }
    io_.restart();
    while (open < nodes_ && io_.run_one() > 0) {
    }
    return Seconds(Clock::now() - start);
  }

  // Every node keeps a sync long-poll; node 0 gives notice. Milliseconds
  // until every node heard the decision; *cpu: the CPU seconds the
  // coordinator and the fleet spent meanwhile, *busiest those of the
  // coordinator's busiest thread, *calls the calls made.
  double SyncDecision(const CoordinatorProcess& coordinator, std::pair<double, double>* cpu,
                      double* busiest, uint64_t* calls) {
    struct Poll {
      std::shared_ptr<Conn> conn;
      uint64_t generation = 0, collect = 0;
      bool decided = false;
    };
    std::vector<Poll> polls(nodes_);
    int decided = 0, parked_rounds = 0;
    bool notice_sent = false;
    Clock::time_point notice_at;
    std::function<void(int)> sync = [&](int n) {
      json req = {{"op", wire::OpName(wire::Op::kSync)},
                  {"job", kJob},
                  {"node", n},
                  {"step", 500},
                  {"rate", 10.0},
                  {"generation", polls[n].generation},
                  {"collect", polls[n].collect},
                  {"wait_ms", 10000}};
      polls[n].conn->Call(Encode(req), [&, n](StatusOr<json> r) {
        if (!r.ok()) Fail("sync of node " + std::to_string(n), r.status());
        Poll& p = polls[n];
        const bool first = p.generation == 0 && !notice_sent;
        p.generation = (*r)["generation"].get<uint64_t>();
        p.collect = (*r)["collect"].get<uint64_t>();
        if (notice_sent && !(*r)["step"].is_null() && !p.decided) {
          p.decided = true;
          ++decided;
          return;  // this node has heard it
        }
        if (first) ++parked_rounds;
        sync(n);
      });
    };
    for (int n = 0; n < nodes_; ++n) {
      OpenWithRetry(n, [&, n](std::shared_ptr<Conn> c) {
        polls[n].conn = c;
        sync(n);
      });
    }
    io_.restart();
    // Every node's poll parked once (its first call answers at once with
    // the current generation; the second one waits).
    while (parked_rounds < nodes_ && io_.run_one() > 0) {
    }
    io_.poll();
    wire_ = Wire();
    const double coordinator_cpu = coordinator.CpuSeconds(), fleet_cpu = OwnCpuSeconds();
    const auto threads_cpu = coordinator.ThreadCpuSeconds();
    notice_at = Clock::now();
    notice_sent = true;
    Call(0,
         Encode({{"op", wire::OpName(wire::Op::kNotice)},
                 {"job", kJob},
                 {"node", 0},
                 {"origin", "scale_bench"},
                 {"step", 600}}),
         [](StatusOr<json> r) {
           if (!r.ok()) Fail("notice", r.status());
         });
    while (decided < nodes_ && io_.run_one() > 0) {
    }
    const double ms = Seconds(Clock::now() - notice_at) * 1000;
    *cpu = {coordinator.CpuSeconds() - coordinator_cpu, OwnCpuSeconds() - fleet_cpu};
    *busiest = BusiestThreadSeconds(threads_cpu, coordinator.ThreadCpuSeconds());
    *calls = wire_.calls;
    for (auto& p : polls) p.conn->Close();
    io_.restart();
    io_.poll();
    return ms;
  }

  // Every node reports "replicated" back to back on a connection of its own
  // for `seconds`; reports answered per second.
  double Reports(double seconds) {
    std::vector<std::shared_ptr<Conn>> conns(nodes_);
    std::vector<int64_t> step(nodes_, kStep);
    uint64_t answered = 0;
    int open = 0;
    bool measuring = false, over = false;
    Clock::time_point start;
    std::function<void(int)> report = [&](int n) {
      if (over) return;
      json req = {{"op", wire::OpName(wire::Op::kReplicated)},
                  {"job", kJob},
                  {"node", n},
                  {"step", ++step[n]},
                  {"nodes", nodes_},
                  {"dp", 1}};
      conns[n]->Call(Encode(req), [&, n](StatusOr<json> r) {
        if (over) return;
        if (!r.ok()) Fail("replicated of node " + std::to_string(n), r.status());
        if (measuring) ++answered;
        report(n);
      });
    };
    for (int n = 0; n < nodes_; ++n) {
      OpenWithRetry(n, [&, n](std::shared_ptr<Conn> c) {
        conns[n] = c;
        ++open;
      });
    }
    io_.restart();
    while (open < nodes_ && io_.run_one() > 0) {
    }
    io_.restart();
    for (int n = 0; n < nodes_; ++n) report(n);
    const auto warm = Clock::now() + std::chrono::milliseconds(500);
    while (Clock::now() < warm) io_.run_one_for(std::chrono::milliseconds(10));
    measuring = true;
    start = Clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) io_.run_one_for(std::chrono::milliseconds(10));
    measuring = false;
    const double rate = static_cast<double>(answered) / Seconds(Clock::now() - start);
    over = true;
    for (auto& c : conns) c->Close();
    io_.restart();
    io_.poll();
    return rate;
  }

 private:
  [[noreturn]] static void Fail(const std::string& what, const Status& s) {
    std::fprintf(stderr, "scale_bench: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
    std::exit(1);
  }

  // The agent's wait before its next try after `failures` failed ones
  // (Restore::BackOff): jittered, 0.2 s doubling to 5 s.
  std::chrono::milliseconds Backoff(int failures) {
    const int64_t ceiling = std::min<int64_t>(200LL << std::min(failures - 1, 5), 5000);
    return std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(0, ceiling)(rng_));
  }

  void Retry(int node, Request request, Done done, int attempt) {
    ++wire_.retries;
    auto timer = std::make_shared<asio::steady_timer>(io_, Backoff(attempt + 1));
    timer->async_wait([this, timer, node, request = std::move(request), done = std::move(done),
                       attempt](ErrorCode) mutable {
      Call(node, std::move(request), std::move(done), attempt + 1);
    });
  }

  // Opens a connection for `node`, retrying with the agent's backoff.
  void OpenWithRetry(int node, std::function<void(std::shared_ptr<Conn>)> done, int attempt = 0) {
    auto conn = std::make_shared<Conn>(io_, to_, Source(node), &wire_);
    conn->Open([this, conn, node, done = std::move(done), attempt](Status s) mutable {
      if (s.ok()) return done(conn);
      ++wire_.retries;
      auto timer = std::make_shared<asio::steady_timer>(io_, Backoff(attempt + 1));
      timer->async_wait([this, timer, node, done = std::move(done), attempt](ErrorCode) mutable {
        OpenWithRetry(node, std::move(done), attempt + 1);
      });
    });
  }

  // Waits for node n's plan of `round` newer than `version`, checks it
  // (check_) and reports ready; again after a replan, until "go".
  void AwaitPlan(int n, int64_t round, int64_t version) {
    json req = {{"op", wire::OpName(wire::Op::kAwaitPlan)},
                {"job", kJob},
                {"round", round},
                {"node", n},
                {"plan_version", version},
                {"peers", json::array({(n + 1) % nodes_})}};
    Call(n, Encode(req), [this, n, round, version](StatusOr<json> r) {
      if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded) {
        return AwaitPlan(n, round, version);
      }
      if (!r.ok()) Fail("await_plan of node " + std::to_string(n), r.status());
      last_plan_ = Clock::now();
      if (std::string wrong = (*check_)(n, *r); !wrong.empty()) {
        Fail("the plan for node " + std::to_string(n), InternalError(wrong));
      }
      Ready(n, round, (*r)["plan_version"].get<int64_t>());
    });
  }

  void Ready(int n, int64_t round, int64_t version) {
    json req = {{"op", wire::OpName(wire::Op::kReady)},
                {"job", kJob},
                {"round", round},
                {"node", n},
                {"plan_version", version},
                {"ok", true},
                {"bad", json::array()}};
    Call(n, Encode(req), [this, n, round, version](StatusOr<json> r) {
      if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded) {
        return Ready(n, round, version);
      }
      if (!r.ok()) Fail("ready of node " + std::to_string(n), r.status());
      auto answer = wire::ReadyReply::FromJson(*r);
      if (!answer.ok()) Fail("ready of node " + std::to_string(n), answer.status());
      if (!answer->go) return AwaitPlan(n, round, version);  // replan
      last_go_ = Clock::now();
      ++gone_;
    });
  }

  const int nodes_;
  const tcp::endpoint to_;
  asio::io_context io_{1};
  Wire wire_;
  // The round in progress: how plans are checked, the nodes told "go", and
  // the latest plan and "go" received.
  const std::function<std::string(int, const json&)>* check_ = nullptr;
  int gone_ = 0;
  Clock::time_point last_plan_, last_go_;
  std::mt19937 rng_{42};
  std::vector<std::shared_ptr<Conn>> links_ = std::vector<std::shared_ptr<Conn>>(nodes_);
};

std::string Digest(int rank) { return Hex64(0x5eed0000ull + static_cast<uint64_t>(rank)); }

// Node n holds its own step and a copy of its left neighbour's.
json Holdings(int n, int nodes) {
  const int left = (n + nodes - 1) % nodes;
  return json::array(
      {json::array({n, kStep, Digest(n)}), json::array({left, kStep, Digest(left)})});
}

void PrintDetail(int nodes, const char* round, const Wire& c, const Wire& w, const Phases& p) {
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf(
      "scale-detail nodes=%d round=%s registration_s=%.2f planning_s=%.2f restore_reports_s=%.2f "
      "go_s=%.2f plan_ms=%.1f coordinator_cpu_s=%.2f fleet_cpu_s=%.2f calls=%llu handshakes=%llu "
      "retries=%llu bytes_out=%llu bytes_in=%llu\n",
      nodes, round, p.registration, p.planning, p.restore_reports, p.go, p.plan_ms,
      p.coordinator_cpu, p.fleet_cpu, u(w.calls), u(w.handshakes), u(w.retries), u(w.bytes_out),
      u(w.bytes_in));
  std::printf(
      "scale-connect nodes=%d round=%s connect_s=%.2f coordinator_cpu_s=%.2f fleet_cpu_s=%.2f "
      "handshakes=%llu retries=%llu\n",
      nodes, round, p.connect, p.connect_coordinator_cpu, p.connect_fleet_cpu, u(c.handshakes),
      u(c.retries));
}

void RunScale(int nodes, double report_seconds) {
  CoordinatorProcess coordinator = CoordinatorProcess::Start();
  Fleet fleet(nodes, coordinator.port);
  Wire fresh, restart, loss, fresh_c, restart_c, loss_c;
  Phases fresh_p, restart_p, loss_p;
  const double fresh_s = fleet.Round(
      "fresh-", [](int) { return json::array(); },
      [](int, const json& plan) {
        return plan["step"].is_null() ? "" : "a fresh start must restore nothing: " + plan.dump();
      },
      coordinator, &fresh_c, &fresh, &fresh_p);
  auto restored = [nodes](int lost) {
    return [nodes, lost](int n, const json& plan) -> std::string {
      if (plan["step"] != kStep) return "step " + plan["step"].dump() + ", not 100";
      const json& src = plan["sources"][std::to_string(n)];
      if (src.is_null() || src["source_rank"] != n) return "no source for its rank";
      if (n == lost) {
        const int right = (n + 1) % nodes;
        if (src["holders"] != json::array({right})) return "holders " + src["holders"].dump();
        if (!plan["addresses"].contains(std::to_string(right))) return "no address for the holder";
      }
      return "";
    };
  };
  const double restart_s = fleet.Round(
      "restart-", [nodes](int n) { return Holdings(n, nodes); }, restored(-1), coordinator,
      &restart_c, &restart, &restart_p);
  const int lost = nodes / 2;
  const double loss_s = fleet.Round(
      "loss-", [nodes, lost](int n) { return n == lost ? json::array() : Holdings(n, nodes); },
      restored(lost), coordinator, &loss_c, &loss, &loss_p);
  std::pair<double, double> sync_cpu;
  uint64_t sync_calls = 0;
  double sync_busiest = 0;
  const double sync_ms = fleet.SyncDecision(coordinator, &sync_cpu, &sync_busiest, &sync_calls);
  const double reports = fleet.Reports(report_seconds);
  const double rss = coordinator.PeakRssMib();
  coordinator.Stop();
  std::printf(
      "scale nodes=%d connect_s=%.2f fresh_round_s=%.2f restart_round_s=%.2f "
      "node_loss_round_s=%.2f sync_decision_ms=%.0f reports_per_s=%.0f coordinator_rss_mib=%.0f\n",
      nodes, fresh_p.connect, fresh_s, restart_s, loss_s, sync_ms, reports, rss);
  PrintDetail(nodes, "fresh", fresh_c, fresh, fresh_p);
  PrintDetail(nodes, "restart", restart_c, restart, restart_p);
  PrintDetail(nodes, "node_loss", loss_c, loss, loss_p);
  std::printf(
      "scale-sync nodes=%d sync_decision_ms=%.0f coordinator_cpu_s=%.2f "
      "coordinator_busiest_thread_cpu_s=%.2f fleet_cpu_s=%.2f calls=%llu\n",
      nodes, sync_ms, sync_cpu.first, sync_busiest, sync_cpu.second,
      static_cast<unsigned long long>(sync_calls));
  std::fflush(stdout);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  CLI::App app{"Strata control plane at scale: N simulated agents against one coordinator"};
  std::vector<int> nodes = {100, 1000, 10000};
  double report_seconds = 3;
  app.add_option("--nodes", nodes, "node counts to run")->delimiter(',');
  app.add_option("--report-seconds", report_seconds, "how long to measure replication reports");
  CLI11_PARSE(app, argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  strata::RaiseFileLimit();
  strata::Log()->set_level(spdlog::level::warn);
  for (int n : nodes) strata::RunScale(n, report_seconds);
  return 0;
}
