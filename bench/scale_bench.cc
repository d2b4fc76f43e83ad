// Copyright 2026 The Strata Authors.
//
// The control plane at scale: the real Coordinator behind the real agent
// Server, in a child process of its own, on 127.0.0.1, driven over real
// loopback sockets by N simulated agents that speak the agent's protocol
// (HMAC handshake, framed JSON calls) — all of them on one event-loop
// thread of this process, each from a loopback address of its own
// (127.x.y.z), as N nodes would come from N hosts. Like the agent
// (RpcPool), a simulated agent keeps one connection to the coordinator for
// its registration, plan and ready calls, opens a new one (retrying with
// jittered backoff) when it cannot make a call, and sends the agent's
// fields with the agent's waits (the coordinator's default for the plan
// and the barrier, 10 s for the sync long-poll); its sync long-poll and its
// replication reports keep one connection each.
//
// For each N (--nodes, default 100,1000,10000) one line:
//
//   scale nodes=N fresh_round_s=… restart_round_s=… node_loss_round_s=…
//         sync_decision_ms=… reports_per_s=… coordinator_rss_mib=…
//
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
// and a line `scale-detail nodes=N calls=… handshakes=… bytes_out=…
// bytes_in=…` per round kind: what one round costs on the wire. Every plan
// is checked (step, holder) and a wrong one fails the run. Targets at
// N = 10,000 on 2 cores: every round <= 10 s, the sync decision <= 1 s,
// the coordinator <= 1 GiB (docs/agent-design.md, "Scale").
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "agent/coordinator/coordinator.h"
#include "agent/rpc/client.h"
#include "agent/rpc/server.h"
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
using Clock = std::chrono::steady_clock;
using ErrorCode = asio::error_code;

constexpr char kSecret[] = "scale-bench-secret";
constexpr char kJob[] = "scale";
constexpr int64_t kStep = 100;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---------------------------------------------------------------------------
// The coordinator process.

// Serves a Coordinator on 127.0.0.1 until its stdin closes; writes the port
// to `port_fd` first.
[[noreturn]] void CoordinatorMain(int port_fd) {
  RaiseFileLimit();
  Log()->set_level(spdlog::level::warn);
  auto listener = net::Socket::Listen("127.0.0.1", 0, SOMAXCONN);
  if (!listener.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(listener.status().message()).c_str());
    _exit(1);
  }
  const uint16_t port = *listener->LocalPort();
  auto coordinator = std::make_unique<agent::Coordinator>();
  agent::Server::Options options;
  // The simulated nodes speak the handshake in plaintext: this bench measures
  // the coordinator at scale; what TLS costs a connection is agent_bench's.
  options.trust = net::Trust{kSecret, nullptr};
  options.workers = 2;
  agent::Server::Handlers handlers;
  handlers.is_long = [](const std::string&) { return false; };
  handlers.control = [c = coordinator.get()](const json& request, const std::string&,
                                             agent::Server::Reply reply) {
    c->HandleAsync(request, std::move(reply));
  };
  handlers.long_call = [](const json&, net::Socket&) -> StatusOr<json> {
    return NotFoundError("no long calls here");
  };
  auto server = agent::Server::Start(std::move(*listener), options, handlers);
  if (!server.ok()) _exit(1);
  if (::write(port_fd, &port, sizeof port) != sizeof port) _exit(1);
  ::close(port_fd);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  coordinator->Shutdown();
  (*server)->Stop();
  _exit(0);
}

struct CoordinatorProcess {
  pid_t pid = -1;
  int stdin_fd = -1;
  uint16_t port = 0;

  static CoordinatorProcess Start() {
    int ports[2], in[2];
    if (::pipe(ports) != 0 || ::pipe(in) != 0) std::abort();
    CoordinatorProcess p;
    p.pid = ::fork();
    if (p.pid == 0) {
      ::dup2(in[0], 0);
      ::close(in[1]);
      ::close(ports[0]);
      CoordinatorMain(ports[1]);
    }
    ::close(in[0]);
    ::close(ports[1]);
    p.stdin_fd = in[1];
    if (::read(ports[0], &p.port, sizeof p.port) != sizeof p.port) {
      std::fprintf(stderr, "scale_bench: the coordinator process did not start\n");
      std::exit(1);
    }
    ::close(ports[0]);
    return p;
  }
  // Peak resident memory of the process, in MiB.
  double PeakRssMib() const {
    return static_cast<double>(ProcessStatus("VmHWM", pid).value_or(-1024)) / 1024.0;
  }
  void Stop() {
    ::close(stdin_fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
};

// ---------------------------------------------------------------------------
// Simulated agents.

struct Wire {  // what a round costs on the wire, seen from the clients
  uint64_t calls = 0, handshakes = 0, bytes_out = 0, bytes_in = 0, retries = 0;
};

using Done = std::function<void(StatusOr<json>)>;

// One authenticated connection from `source` to the coordinator: Open, then
// calls one at a time.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(asio::io_context& io, tcp::endpoint to, asio::ip::address source, Wire* wire)
      : socket_(io), to_(to), source_(source), wire_(wire) {}

  void Open(std::function<void(Status)> done) {
    ErrorCode ec;
    socket_.open(tcp::v4(), ec);
    if (!ec) socket_.bind(tcp::endpoint(source_, 0), ec);
    if (ec) return done(UnavailableError("socket: " + ec.message()));
    socket_.async_connect(to_, [self = shared_from_this(), done](ErrorCode e) {
      if (e) return done(UnavailableError("connect: " + e.message()));
      self->socket_.set_option(tcp::no_delay(true), e);
      self->Handshake(done);
    });
  }

  void Call(const json& request, Done done) {
    ++wire_->calls;
    Send(
        net::EncodeFrame(agent::kFrameCall, request.dump()),
        [self = shared_from_this(), done] {
          self->Recv(agent::kMaxControlBytes, [self, done](StatusOr<net::Frame> f) {
            if (!f.ok()) return done(f.status());
            json reply = json::parse(f->payload, nullptr, false);
            if (reply.is_discarded()) return done(DataLossError("unparsable reply"));
            if (!reply.value("ok", false)) return done(wire::StatusFromJson(reply, "coordinator"));
            done(std::move(reply));
          });
        },
        [done](Status s) { done(s); });
  }

  void Close() {
    ErrorCode ignored;
    socket_.close(ignored);
  }

 private:
  void Handshake(std::function<void(Status)> done) {
    ++wire_->handshakes;
    handshake_.emplace(kSecret, "bench", "coordinator");
    auto hello = handshake_->Hello();
    if (!hello.ok()) return done(hello.status());
    auto self = shared_from_this();
    Send(
        net::EncodeFrame(net::kFrameHello, *hello),
        [self, done] {
          self->Recv(net::kMaxAuthPayload, [self, done](StatusOr<net::Frame> challenge) {
            if (!challenge.ok()) return done(challenge.status());
            std::string refusal;
            auto proof = self->handshake_->OnChallenge(*challenge, &refusal);
            if (!proof.ok()) return done(proof.status());
            self->Send(
                net::EncodeFrame(net::kFrameProof, *proof),
                [self, done] {
                  self->Recv(net::kMaxAuthPayload, [self, done](StatusOr<net::Frame> ok) {
                    done(ok.ok() ? self->handshake_->OnOk(*ok) : ok.status());
                  });
                },
                done);
          });
        },
        done);
  }

  void Send(std::string bytes, std::function<void()> then, std::function<void(Status)> fail) {
    wire_->bytes_out += bytes.size();
    out_ = std::move(bytes);
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), then, fail](ErrorCode ec, size_t) {
                        if (ec) return fail(UnavailableError("send: " + ec.message()));
                        then();
                      });
  }

  void Recv(uint32_t max, std::function<void(StatusOr<net::Frame>)> then) {
    asio::async_read(
        socket_, asio::buffer(header_),
        [self = shared_from_this(), max, then](ErrorCode ec, size_t) {
          if (ec) return then(UnavailableError("receive: " + ec.message()));
          net::Frame f;
          uint32_t length = 0;
          Status s = net::ParseFrameHeader(self->header_, max, "coordinator", &f, &length);
          if (!s.ok()) return then(s);
          self->wire_->bytes_in += net::kFrameHeaderSize + length;
          self->in_ = std::move(f);
          self->in_.payload.resize(length);
          asio::async_read(self->socket_, asio::buffer(self->in_.payload),
                           [self, then](ErrorCode e, size_t) {
                             if (e) return then(UnavailableError("receive: " + e.message()));
                             then(std::move(self->in_));
                           });
        });
  }

  tcp::socket socket_;
  const tcp::endpoint to_;
  const asio::ip::address source_;
  Wire* const wire_;
  std::optional<net::ClientHandshake> handshake_;
  char header_[net::kFrameHeaderSize];
  net::Frame in_;
  std::string out_;
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
  void Call(int node, json request, Done done, int attempt = 0) {
    auto& link = links_[node];
    if (!link) {
      return OpenWithRetry(node, [this, node, request, done, attempt](std::shared_ptr<Conn> c) {
        links_[node] = c;
        Call(node, request, done, attempt);
      });
    }
    auto conn = link;
    conn->Call(request, [this, conn, node, request, done, attempt](StatusOr<json> r) {
      if (!r.ok() && r.status().code() == StatusCode::kUnavailable &&
          r.status().message().find("shutting down") == std::string::npos) {
        conn->Close();
        if (links_[node] == conn) links_[node].reset();
        return Retry(node, request, done, attempt);
      }
      done(std::move(r));
    });
  }

  // A round: every node registers (with `inventory(node)`), waits for the
  // plan, checks it with `check(node, plan)` and reports ready until "go".
  double Round(const std::string& incarnation, const std::function<json(int)>& inventory,
               const std::function<std::string(int, const json&)>& check, Wire* wire) {
    for (auto& link : links_) {  // restarted agents connect anew
      if (link) link->Close();
      link.reset();
    }
    wire_ = Wire();
    int done = 0;
    const auto start = Clock::now();
    for (int n = 0; n < nodes_; ++n) {
      json reg = {{"op", wire::OpName(wire::Op::kRegister)},
                  {"job", kJob},
                  {"nodes", nodes_},
                  {"node", n},
                  {"dp", 1},
                  {"address", "127.0.0.1:" + std::to_string(9000 + n % 50000)},
                  {"inventory", inventory(n)},
                  {"incarnation", incarnation + std::to_string(n)}};
      Call(n, reg, [this, n, check, &done](StatusOr<json> r) {
        if (!r.ok()) Fail("register of node " + std::to_string(n), r.status());
        auto reply = wire::RegisterReply::FromJson(*r);
        if (!reply.ok()) Fail("register of node " + std::to_string(n), reply.status());
        AwaitPlan(n, reply->round, 0, check, [&done] { ++done; });
      });
    }
    io_.restart();
    while (done < nodes_ && io_.run_one() > 0) {
    }
    const double seconds = Seconds(Clock::now() - start);
    *wire = wire_;
    for (auto& link : links_) {  // the descriptors are needed for what follows
      if (link) link->Close();
      link.reset();
    }
    io_.restart();
    io_.poll();
    std::fprintf(stderr, "scale_bench: nodes=%d round %s: %.2f s\n", nodes_, incarnation.c_str(),
                 seconds);
    return seconds;
  }

  // Every node keeps a sync long-poll; node 0 gives notice. Milliseconds
  // until every node heard the decision.
  double SyncDecision() {
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
      polls[n].conn->Call(req, [&, n](StatusOr<json> r) {
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
    notice_at = Clock::now();
    notice_sent = true;
    Call(0,
         {{"op", wire::OpName(wire::Op::kNotice)},
          {"job", kJob},
          {"node", 0},
          {"origin", "scale_bench"},
          {"step", 600}},
         [](StatusOr<json> r) {
           if (!r.ok()) Fail("notice", r.status());
         });
    while (decided < nodes_ && io_.run_one() > 0) {
    }
    const double ms = Seconds(Clock::now() - notice_at) * 1000;
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
      conns[n]->Call(req, [&, n](StatusOr<json> r) {
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

  void Retry(int node, json request, Done done, int attempt) {
    ++wire_.retries;
    auto timer = std::make_shared<asio::steady_timer>(io_);
    std::uniform_int_distribution<int> jitter(0, 50 << std::min(attempt, 4));
    timer->expires_after(std::chrono::milliseconds(20 + jitter(rng_)));
    timer->async_wait([this, timer, node, request, done, attempt](ErrorCode) {
      Call(node, request, done, attempt + 1);
    });
  }

  // Opens a connection for `node`, retrying with jittered backoff.
  void OpenWithRetry(int node, std::function<void(std::shared_ptr<Conn>)> done, int attempt = 0) {
    auto conn = std::make_shared<Conn>(io_, to_, Source(node), &wire_);
    conn->Open([this, conn, node, done, attempt](Status s) {
      if (s.ok()) return done(conn);
      ++wire_.retries;
      auto timer = std::make_shared<asio::steady_timer>(io_);
      std::uniform_int_distribution<int> jitter(0, 50 << std::min(attempt, 4));
      timer->expires_after(std::chrono::milliseconds(20 + jitter(rng_)));
      timer->async_wait([this, timer, node, done, attempt](ErrorCode) {
        OpenWithRetry(node, done, attempt + 1);
      });
    });
  }

  void AwaitPlan(int n, int64_t round, int64_t version,
                 const std::function<std::string(int, const json&)>& check,
                 std::function<void()> finished) {
    json req = {{"op", wire::OpName(wire::Op::kAwaitPlan)},
                {"job", kJob},
                {"round", round},
                {"node", n},
                {"plan_version", version},
                {"peers", json::array({(n + 1) % nodes_})}};
    Call(n, req, [this, n, round, version, check, finished](StatusOr<json> r) {
      if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded) {
        return AwaitPlan(n, round, version, check, finished);
      }
      if (!r.ok()) Fail("await_plan of node " + std::to_string(n), r.status());
      if (std::string wrong = check(n, *r); !wrong.empty()) {
        Fail("the plan for node " + std::to_string(n), InternalError(wrong));
      }
      Ready(n, round, (*r)["plan_version"].get<int64_t>(), check, finished);
    });
  }

  void Ready(int n, int64_t round, int64_t version,
             const std::function<std::string(int, const json&)>& check,
             std::function<void()> finished) {
    json req = {{"op", wire::OpName(wire::Op::kReady)},
                {"job", kJob},
                {"round", round},
                {"node", n},
                {"plan_version", version},
                {"ok", true},
                {"bad", json::array()}};
    Call(n, req, [this, n, round, version, check, finished](StatusOr<json> r) {
      if (!r.ok() && r.status().code() == StatusCode::kDeadlineExceeded) {
        return Ready(n, round, version, check, finished);
      }
      if (!r.ok()) Fail("ready of node " + std::to_string(n), r.status());
      auto answer = wire::ReadyReply::FromJson(*r);
      if (!answer.ok()) Fail("ready of node " + std::to_string(n), answer.status());
      if (answer->go) return finished();
      AwaitPlan(n, round, version, check, finished);  // replan
    });
  }

  const int nodes_;
  const tcp::endpoint to_;
  asio::io_context io_{1};
  Wire wire_;
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

void PrintDetail(int nodes, const char* round, const Wire& w) {
  std::printf(
      "scale-detail nodes=%d round=%s calls=%llu handshakes=%llu retries=%llu bytes_out=%llu "
      "bytes_in=%llu\n",
      nodes, round, static_cast<unsigned long long>(w.calls),
      static_cast<unsigned long long>(w.handshakes), static_cast<unsigned long long>(w.retries),
      static_cast<unsigned long long>(w.bytes_out), static_cast<unsigned long long>(w.bytes_in));
}

void RunScale(int nodes, double report_seconds) {
  CoordinatorProcess coordinator = CoordinatorProcess::Start();
  Fleet fleet(nodes, coordinator.port);
  Wire fresh, restart, loss;
  const double fresh_s = fleet.Round(
      "fresh-", [](int) { return json::array(); },
      [](int, const json& plan) {
        return plan["step"].is_null() ? "" : "a fresh start must restore nothing: " + plan.dump();
      },
      &fresh);
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
      "restart-", [nodes](int n) { return Holdings(n, nodes); }, restored(-1), &restart);
  const int lost = nodes / 2;
  const double loss_s = fleet.Round(
      "loss-", [nodes, lost](int n) { return n == lost ? json::array() : Holdings(n, nodes); },
      restored(lost), &loss);
  const double sync_ms = fleet.SyncDecision();
  const double reports = fleet.Reports(report_seconds);
  const double rss = coordinator.PeakRssMib();
  coordinator.Stop();
  std::printf(
      "scale nodes=%d fresh_round_s=%.2f restart_round_s=%.2f node_loss_round_s=%.2f "
      "sync_decision_ms=%.0f reports_per_s=%.0f coordinator_rss_mib=%.0f\n",
      nodes, fresh_s, restart_s, loss_s, sync_ms, reports, rss);
  PrintDetail(nodes, "fresh", fresh);
  PrintDetail(nodes, "restart", restart);
  PrintDetail(nodes, "node_loss", loss);
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
