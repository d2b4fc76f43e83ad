// Copyright 2026 The Strata Authors.
#include "agent/rpc/server.h"

#include <asio.hpp>
#include <atomic>
#include <map>
#include <optional>
#include <thread>

#include "net/auth.h"
#include "net/frame.h"
#include "net/handshake_budget.h"
#include "net/socket.h"
#include "util/json_bounded.h"
#include "util/logging.h"
#include "util/mutex.h"
#include "util/process.h"
#include "wire/json.h"

namespace strata::agent {
namespace {

using asio::ip::tcp;
using Stream = asio::generic::stream_protocol;  // TCP and Unix-domain connections alike
using LocalProtocol = asio::local::stream_protocol;
using ErrorCode = asio::error_code;

// 3/4 of the descriptor limit (raised to the hard one first).
int DefaultMaxConnections() {
  const int64_t limit = RaiseFileLimit();
  return limit < 0 ? 1 << 20 : static_cast<int>(std::max<int64_t>(64, limit / 4 * 3));
}

// The reply frame for a call's answer from `peer` (`who`), with the error
// logged as it deserves; none when the answer says "closed" (the call's
// data was its answer). *close_after: close the connection after it
// (DATA_LOSS: the stream is out of sync).
std::optional<std::string> ReplyFrame(StatusOr<json> answer, const std::string& peer,
                                      const std::string& who, bool* close_after) {
  *close_after = false;
  if (answer.ok()) {
    if (answer->value("closed", false)) return std::nullopt;
    (*answer)["ok"] = true;
    return net::EncodeFrame(kFrameReply, answer->dump());
  }
  // Waits that ran out, superseded rounds and shutdown are how the protocol
  // goes; only other errors are worth a warning.
  const StatusCode code = answer.status().code();
  const bool routine = code == StatusCode::kDeadlineExceeded || code == StatusCode::kAborted ||
                       code == StatusCode::kUnavailable;
  Log()->log(routine ? spdlog::level::debug : spdlog::level::warn, "{} ({}): {}", peer, who,
             answer.status().message());
  *close_after = code == StatusCode::kDataLoss;
  return net::EncodeFrame(kFrameReply, wire::StatusToJson(answer.status()).dump());
}

// Repeated refusals and accept errors are logged at most this often.
constexpr auto kLogPeriod = std::chrono::seconds(10);

}  // namespace

class Server::Impl : public std::enable_shared_from_this<Server::Impl> {
 public:
  Impl(Options options, Handlers handlers)
      : options_(std::move(options)),
        handlers_(std::move(handlers)),
        workers_(static_cast<size_t>(std::max(1, options_.workers))),
        budget_(options_.max_handshakes, options_.max_handshakes_per_source) {
    if (options_.max_connections <= 0) options_.max_connections = DefaultMaxConnections();
  }

  Status Start(net::Socket listener, net::Socket local_listener);
  void Stop();
  Stats stats() const;

  // Called by sessions, on the loop thread unless stated.
  const Options& options() const { return options_; }
  const Handlers& handlers() const { return handlers_; }
  asio::io_context& io() { return io_; }
  asio::thread_pool& workers() { return workers_; }
  void ReleaseHandshake(const std::string& source) { budget_.Release(source); }
  void Forget(uint64_t id);
  void Authenticated() { ++authenticated_; }
  void Called() { ++calls_; }
  // Reserves a place for a long call: false when max_long_calls run.
  bool ReserveLong();
  void ReleaseLong();  // gives a reservation back
  // Runs a reserved long call on a thread of its own; false (the
  // reservation given back) once stopped.
  bool RunLong(std::function<void()> fn);

 private:
  void Accept();
  void AcceptLocal();
  // Retries an accept that failed (e.g. out of descriptors) shortly, on
  // `retry` (each acceptor's own).
  void AcceptFailed(const ErrorCode& ec, asio::steady_timer& retry, std::function<void()> again);
  void OnAccepted(tcp::socket socket);
  void OnAcceptedLocal(LocalProtocol::socket socket);
  // Starts a session over `fd` (its kind: `protocol`), holding a
  // handshake slot for `source`.
  void StartSession(int fd, Stream protocol, std::string peer, std::string source,
                    std::optional<net::LocalPeer> local);
  // `what`: "unauthenticated " or "".
  // Counts a refused connection; logs `count` of them as one line when
  // `due` (a LogLimiter's verdict). `count` is read here, after the verdict
  // that sets it (the order a call's arguments are evaluated in is not).
  void Refused(bool due, const uint64_t& count, const char* what, const std::string& peer,
               const std::string& why);
  void Reap(uint64_t thread_id);

  Options options_;
  const Handlers handlers_;
  asio::io_context io_;  // before everything that holds its objects
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  tcp::acceptor acceptor_{io_};
  LocalProtocol::acceptor local_acceptor_{io_};
  asio::steady_timer accept_retry_{io_};
  asio::steady_timer local_accept_retry_{io_};
  asio::thread_pool workers_;
  std::thread loop_;
  net::HandshakeBudget budget_;  // counts its own refusals
  LogLimiter over_cap_;          // connections refused at max_connections
  LogLimiter accept_errors_;
  LogLimiter local_refusals_;  // local callers refused by authorize_local
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;  // loop thread only
  uint64_t next_session_ = 0;                              // loop thread only
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> accepted_{0}, authenticated_{0}, refused_{0}, calls_{0}, local_{0};
  std::atomic<int> open_{0};

  mutable Mutex long_mu_;
  std::map<uint64_t, std::thread> long_threads_ GUARDED_BY(long_mu_);
  uint64_t next_thread_ GUARDED_BY(long_mu_) = 0;
  int long_calls_ GUARDED_BY(long_mu_) = 0;
};

// One connection, on the loop thread: handshake, then calls one at a time.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `local`: a caller on this node, over the Unix-domain socket, with the
  // credentials the kernel recorded (already authorized).
  Session(Server::Impl* server, uint64_t id, Stream::socket socket, Stream protocol,
          std::string peer, std::string source, std::optional<net::LocalPeer> local)
      : server_(server),
        id_(id),
        protocol_(protocol),
        socket_(std::move(socket)),
        timer_(server->io()),
        peer_(std::move(peer)),
        source_(std::move(source)),
        local_(std::move(local)) {}

  void Start();
  // Closes the connection (logging `why` unless empty) and forgets it.
  void Close(const std::string& why);
  // The answer to the call in progress.
  void Answer(StatusOr<json> reply);
  // Takes the socket back after a long call (`socket` closed: it ended the
  // connection).
  void Resume(net::Socket socket);

 private:
  using Then = std::function<void()>;
  using Clock = std::chrono::steady_clock;
  // The connection's deadline: it closes, logging `why` unless empty, once
  // `after` has passed, unless armed again or disarmed first.
  void Arm(std::chrono::milliseconds after, const char* why);
  void Disarm() { deadline_ = Clock::time_point::max(); }
  // The timer wakes at `at` (OnTimer).
  void WakeAt(Clock::time_point at);
  void OnTimer();
  void TlsHandshake();
  void ReadFrame(uint32_t max_payload, Then then);
  void ReceivePayload(uint32_t length, Then then);
  // Receives exactly n bytes into p (`between_calls`: the peer may hang up
  // before the first of them, which closes quietly), then `then`.
  void Receive(char* p, size_t n, bool between_calls, Then then);
  // Sends out_[sent..], then `then`.
  void Send(size_t sent, Then then);
  // Send's wait for the socket (`step`), then Send(sent, then).
  void AwaitSend(const net::IoStep& step, size_t sent, Then then);
  // Waits for the socket to be ready as `step` wants, then `retry`.
  void Await(const net::IoStep& step, Then retry);
  void Write(std::string bytes, Then then);
  void RefuseHandshake(const std::string& refusal, const Status& status);
  void OnHello();
  void OnProof();
  void OnLocalHello();
  // The handshake is over: `who` is the client's id.
  void Accepted(std::string who);
  void AwaitCall();
  void OnCall();
  void Control(json request);
  void Long(json request);

  Server::Impl* const server_;
  const uint64_t id_;
  const Stream protocol_;
  Stream::socket socket_;
  std::unique_ptr<net::TlsStream> tls_;  // null: plaintext, or lent to a long call
  // One deadline per connection, re-armed by every call. The timer is set
  // only when the deadline comes before the timer's wake-up: woken before
  // the deadline, it sleeps again until it. So a deadline that moves later,
  // as the idle one does with every call, costs no timer operation.
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();  // max: disarmed
  const char* deadline_why_ = "";
  std::optional<Clock::time_point> wake_at_;  // the timer's, while it is set
  bool reply_armed_ = false;                  // the reply being sent has its deadline
  const std::string peer_, source_;
  const std::optional<net::LocalPeer> local_;
  std::string who_;
  std::optional<net::ServerHandshake> handshake_;  // set while a network peer authenticates
  bool authenticated_ = false;
  bool holds_handshake_slot_ = true;
  bool closed_ = false;
  char header_[net::kFrameHeaderSize];
  net::Frame frame_;
  std::string out_;
};

void Session::Start() {
  const net::Trust& trust = server_->options().trust;
  Arm(server_->options().auth_timeout, "rejected connection: handshake timed out");
  ErrorCode ec;
  socket_.native_non_blocking(true, ec);
  if (ec) return Close("rejected connection: " + ec.message());
  if (local_) return ReadFrame(net::kMaxAuthPayload, [this] { OnLocalHello(); });
  handshake_.emplace(trust.secret, peer_);
  if (!trust.encrypted()) return ReadFrame(net::kMaxAuthPayload, [this] { OnHello(); });
  auto tls = net::TlsStream::New(trust.tls, socket_.native_handle(), net::TlsStream::Role::kServer,
                                 "", peer_);
  if (!tls.ok()) return Close("rejected connection: " + std::string(tls.status().message()));
  tls_ = std::move(*tls);
  TlsHandshake();
}

void Session::TlsHandshake() {
  StatusOr<net::IoStep> step = tls_->Handshake();
  if (!step.ok()) return Close("rejected connection: " + std::string(step.status().message()));
  switch (step->kind) {
    case net::IoStep::kProgress:
      return ReadFrame(net::kMaxAuthPayload, [this] { OnHello(); });
    case net::IoStep::kClosed:
      return Close("rejected connection: closed during the TLS handshake");
    default:
      return Await(*step, [this] { TlsHandshake(); });
  }
}

void Session::Close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  if (!why.empty()) {
    Log()->warn("{}{}: {}", peer_, who_.empty() ? "" : " (" + who_ + ")", why);
  }
  if (holds_handshake_slot_) server_->ReleaseHandshake(source_);
  holds_handshake_slot_ = false;
  if (tls_ != nullptr) tls_->Shutdown();
  ErrorCode ignored;
  socket_.close(ignored);
  tls_.reset();
  Disarm();
  ++timer_generation_;
  timer_.cancel();       // the timer's handler holds the session
  server_->Forget(id_);  // may drop the last reference but the caller's
}

void Session::Arm(std::chrono::milliseconds after, const char* why) {
  deadline_ = Clock::now() + after;
  deadline_why_ = why;
  if (!wake_at_ || *wake_at_ > deadline_) WakeAt(deadline_);
}

void Session::WakeAt(Clock::time_point at) {
  const uint64_t generation = ++timer_generation_;
  wake_at_ = at;
  timer_.expires_at(at);  // a wait already set ends with operation_aborted
  timer_.async_wait([self = shared_from_this(), generation](ErrorCode ec) {
    if (ec || generation != self->timer_generation_) return;  // set again since
    self->OnTimer();
  });
}

void Session::OnTimer() {
  wake_at_.reset();
  if (closed_ || deadline_ == Clock::time_point::max()) return;  // disarmed
  if (Clock::now() < deadline_) return WakeAt(deadline_);        // moved later
  Close(deadline_why_);
}

void Session::ReadFrame(uint32_t max_payload, Then then) {
  Receive(header_, sizeof header_, /*between_calls=*/authenticated_, [this, max_payload, then] {
    uint32_t length = 0;
    frame_ = net::Frame();
    Status s = net::ParseFrameHeader(header_, max_payload, peer_, &frame_, &length);
    if (!s.ok()) {
      return Close((authenticated_ ? "" : "rejected connection: ") + std::string(s.message()));
    }
    if (length == 0) return then();
    ReceivePayload(length, std::move(then));
  });
}

// The payload's memory grows with the bytes that arrive (doubling, from
// kPayloadChunk), not with the length the header declares: a peer that
// declares a large frame and sends little costs little.
void Session::ReceivePayload(uint32_t length, Then then) {
  const size_t have = frame_.payload.size();
  if (have == length) return then();
  const size_t grow = std::min<size_t>(length - have, std::max(net::kPayloadChunk, have));
  frame_.payload.resize(have + grow);
  Receive(frame_.payload.data() + have, grow, /*between_calls=*/false,
          [this, length, then = std::move(then)]() mutable {
            ReceivePayload(length, std::move(then));
          });
}

void Session::Receive(char* p, size_t n, bool between_calls, Then then) {
  while (n > 0) {
    StatusOr<net::IoStep> step = tls_ != nullptr ? tls_->Read(p, n)
                                                 : net::TryRecvPlain(socket_.native_handle(), p, n,
                                                                     "receiving from " + peer_);
    const char* context = authenticated_ ? "receiving: " : "rejected connection: ";
    if (!step.ok()) return Close(context + std::string(step.status().message()));
    if (step->kind == net::IoStep::kProgress) {
      p += step->bytes;
      n -= step->bytes;
      between_calls = false;
      continue;
    }
    if (step->kind == net::IoStep::kClosed) {
      // A hang-up between calls is how connections end.
      return Close(between_calls ? "" : context + std::string("the peer closed the connection"));
    }
    return Await(*step, [this, p, n, between_calls, then] { Receive(p, n, between_calls, then); });
  }
  then();
}

void Session::Send(size_t sent, Then then) {
  while (sent < out_.size()) {
    const char* p = out_.data() + sent;
    const size_t n = out_.size() - sent;
    StatusOr<net::IoStep> step =
        tls_ != nullptr ? tls_->Write(p, n)
                        : net::TrySendPlain(socket_.native_handle(), p, n, "sending to " + peer_);
    if (!step.ok()) return Close("sending: " + std::string(step.status().message()));
    if (step->kind == net::IoStep::kProgress) {
      sent += step->bytes;
      continue;
    }
    if (step->kind == net::IoStep::kClosed) return Close("sending: the peer closed the connection");
    return AwaitSend(*step, sent, std::move(then));
  }
  if (tls_ != nullptr && tls_->unsent() > 0) {  // records TLS held back to send together
    StatusOr<net::IoStep> step = tls_->Flush();
    if (!step.ok()) return Close("sending: " + std::string(step.status().message()));
    if (step->kind != net::IoStep::kProgress) return AwaitSend(*step, sent, std::move(then));
  }
  then();
}

// A reply that does not go out at once gets its deadline when it first
// waits (while the peer authenticates, the handshake's deadline, armed at
// Start, bounds its replies too).
void Session::AwaitSend(const net::IoStep& step, size_t sent, Then then) {
  if (authenticated_ && !reply_armed_) {
    reply_armed_ = true;
    Arm(server_->options().reply_timeout, "the peer does not take our reply");
  }
  Await(step, [this, sent, then = std::move(then)] { Send(sent, then); });
}

// `retry` runs on the loop thread while the session is open; a session
// closed meanwhile (timer, Stop) cancels the wait.
void Session::Await(const net::IoStep& step, Then retry) {
  const auto want =
      step.kind == net::IoStep::kWantWrite ? Stream::socket::wait_write : Stream::socket::wait_read;
  socket_.async_wait(want, [self = shared_from_this(), retry = std::move(retry)](ErrorCode ec) {
    if (self->closed_) return;
    if (ec) return self->Close("waiting for the socket: " + ec.message());
    retry();
  });
}

void Session::Write(std::string bytes, Then then) {
  out_ = std::move(bytes);
  reply_armed_ = false;
  Send(0, std::move(then));
}

void Session::RefuseHandshake(const std::string& refusal, const Status& status) {
  const std::string why = "rejected connection: " + std::string(status.message());
  if (refusal.empty()) return Close(why);
  Write(net::EncodeFrame(net::kFrameError, refusal), [this, why] { Close(why); });
}

void Session::OnHello() {
  std::string refusal;
  auto challenge = handshake_->OnHello(frame_, &refusal);
  if (!challenge.ok()) return RefuseHandshake(refusal, challenge.status());
  Write(net::EncodeFrame(net::kFrameChallenge, *challenge),
        [this] { ReadFrame(net::kMaxAuthPayload, [this] { OnProof(); }); });
}

void Session::OnProof() {
  std::string refusal;
  auto id = handshake_->OnProof(frame_, &refusal);
  if (!id.ok()) return RefuseHandshake(refusal, id.status());
  handshake_.reset();
  Accepted(std::move(*id));
}

void Session::OnLocalHello() {
  std::string refusal;
  auto id = net::OnLocalHello(frame_, peer_, &refusal);
  if (!id.ok()) return RefuseHandshake(refusal, id.status());
  Accepted(*id + ", " + local_->Describe());
}

void Session::Accepted(std::string who) {
  who_ = std::move(who);
  authenticated_ = true;
  if (tls_ != nullptr) tls_->WidenReadBuffer();  // small until now: see TlsStream
  server_->ReleaseHandshake(source_);
  holds_handshake_slot_ = false;
  server_->Authenticated();
  Write(net::EncodeFrame(net::kFrameAuthOk, ""), [this] { AwaitCall(); });
}

void Session::AwaitCall() {
  Arm(server_->options().idle_timeout, "");  // an idle connection closes quietly
  ReadFrame(server_->options().max_request_bytes, [this] { OnCall(); });
}

void Session::OnCall() {
  Disarm();  // a call may take as long as it takes
  server_->Called();
  json request = ParseBounded(frame_.payload);
  frame_.payload.clear();
  if (frame_.type != kFrameCall || !request.is_object()) {
    return Answer(InvalidArgumentError("malformed call"));
  }
  auto op = request.find("op");  // unchecked input: any type
  const std::string name = op != request.end() && op->is_string() ? op->get<std::string>() : "";
  const auto& local_only = server_->options().local_only;
  if (!local_ && local_only && local_only(request)) {
    return Answer(PermissionDeniedError(
        "\"" + name +
        "\" as asked is accepted only from this node's own callers (the agent's "
        "local socket), never over the network, whatever the caller knows"));
  }
  if (server_->handlers().is_long(name)) return Long(std::move(request));
  Control(std::move(request));
}

void Session::Control(json request) {
  std::weak_ptr<Server::Impl> server = server_->weak_from_this();
  std::weak_ptr<Session> session = weak_from_this();
  auto once = std::make_shared<std::atomic<bool>>(false);
  Server::Reply reply = [server, session, once](StatusOr<json> r) {
    if (once->exchange(true)) return;
    auto s = server.lock();
    if (!s) return;  // the server is gone: the answer has nowhere to go
    asio::post(s->io(), [session, r = std::move(r)]() mutable {
      if (auto live = session.lock()) live->Answer(std::move(r));
    });
  };
  asio::post(server_->workers(),
             [handlers = &server_->handlers(), request = std::move(request), who = who_, reply]() {
               try {  // a field of the wrong type must not take the agent down
                 handlers->control(request, who, reply);
               } catch (const json::exception& e) {
                 reply(InvalidArgumentError(std::string("malformed call: ") + e.what()));
               }
             });
}

void Session::Answer(StatusOr<json> reply) {
  if (closed_) return;
  bool close_after = false;
  std::optional<std::string> frame = ReplyFrame(std::move(reply), peer_, who_, &close_after);
  if (!frame) return Close("");
  Write(std::move(*frame), [this, close_after] {
    if (close_after) return Close("");
    AwaitCall();
  });
}

// The connection leaves the loop for a thread of its own; the thread sends
// the answer itself (the call may have sent and received before it) and
// hands the socket back.
void Session::Long(json request) {
  if (!server_->ReserveLong()) {
    return Answer(ResourceExhaustedError(
        "this agent is busy: " + std::to_string(server_->options().max_long_calls) +
        " transfers or maintenance calls in progress; try again"));
  }
  ErrorCode ec;
  const int fd = socket_.release(ec);
  if (ec) {
    server_->ReleaseLong();
    return Close("taking the connection off the event loop: " + ec.message());
  }
  auto socket = std::make_shared<net::Socket>(net::Socket::Adopt(fd, peer_, std::move(tls_)));
  std::weak_ptr<Server::Impl> server = server_->weak_from_this();
  std::weak_ptr<Session> session = weak_from_this();
  const std::string peer = peer_, who = who_;
  const auto reply_timeout = server_->options().reply_timeout;
  const Server::Handlers* handlers = &server_->handlers();
  Server::Impl* impl = server_;  // outlives the thread: Stop joins it
  auto run = [=, request = std::move(request)]() {
    StatusOr<json> r = InternalError("no answer");
    try {
      r = handlers->long_call(request, *socket);
    } catch (const json::exception& e) {
      r = InvalidArgumentError(std::string("malformed call: ") + e.what());
    }
    // The slot is free before the caller hears back, so a caller that got
    // its answer may start the next long call at once.
    impl->ReleaseLong();
    bool close_after = false;
    std::optional<std::string> frame = ReplyFrame(std::move(r), peer, who, &close_after);
    const bool sent =
        frame &&
        socket->SendAll(frame->data(), frame->size(), net::DeadlineAfter(reply_timeout)).ok();
    if (!sent || close_after) socket->Close();
    if (auto s = server.lock()) {
      asio::post(s->io(), [session, socket]() mutable {
        if (auto live = session.lock()) live->Resume(std::move(*socket));
      });
    }
  };
  if (!server_->RunLong(std::move(run))) socket->Close();  // stopping
}

void Session::Resume(net::Socket socket) {
  if (closed_) return;
  if (!socket.is_open()) return Close("");
  ErrorCode ec;
  const int fd = socket.Release(&tls_);
  socket_.assign(protocol_, fd, ec);
  if (ec) {
    tls_.reset();
    ::close(fd);
    return Close("taking the connection back after a long call: " + ec.message());
  }
  AwaitCall();
}

Status Server::Impl::Start(net::Socket listener, net::Socket local_listener) {
  ErrorCode ec;
  const int family = listener.Family();
  const int fd = listener.Release();
  acceptor_.assign(family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return InternalError("serving the listening socket: " + ec.message());
  }
  if (local_listener.is_open()) {
    const int local_fd = local_listener.Release();
    local_acceptor_.assign(LocalProtocol(), local_fd, ec);
    if (ec) {
      ::close(local_fd);
      return InternalError("serving the local socket: " + ec.message());
    }
  }
  guard_.emplace(io_.get_executor());
  Accept();
  if (local_acceptor_.is_open()) AcceptLocal();
  loop_ = std::thread([this] { io_.run(); });
  return Status::Ok();
}

void Server::Impl::AcceptFailed(const ErrorCode& ec, asio::steady_timer& retry,
                                std::function<void()> again) {
  accept_errors_.Add();
  uint64_t n = 0;
  if (accept_errors_.Due(kLogPeriod, &n)) Log()->warn("accept ({} times): {}", n, ec.message());
  retry.expires_after(std::chrono::milliseconds(100));
  retry.async_wait([this, again = std::move(again)](ErrorCode e) {
    if (!e && !stopped_) again();
  });
}

void Server::Impl::Accept() {
  acceptor_.async_accept([this](ErrorCode ec, tcp::socket socket) {
    if (stopped_ || ec == asio::error::operation_aborted) return;
    if (ec) return AcceptFailed(ec, accept_retry_, [this] { Accept(); });  // e.g. out of fds
    OnAccepted(std::move(socket));
    Accept();
  });
}

void Server::Impl::AcceptLocal() {
  local_acceptor_.async_accept([this](ErrorCode ec, LocalProtocol::socket socket) {
    if (stopped_ || ec == asio::error::operation_aborted) return;
    if (ec) return AcceptFailed(ec, local_accept_retry_, [this] { AcceptLocal(); });
    OnAcceptedLocal(std::move(socket));
    AcceptLocal();
  });
}

void Server::Impl::Refused(bool due, const uint64_t& count, const char* what,
                           const std::string& peer, const std::string& why) {
  ++refused_;
  if (due) Log()->warn("closed {} {}connection(s), latest from {}: {}", count, what, peer, why);
}

void Server::Impl::OnAccepted(tcp::socket socket) {
  ++accepted_;
  ErrorCode ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  const std::string peer = net::Endpoint{remote.address().to_string(), remote.port()}.ToString();
  uint64_t n = 0;
  if (open_.load() >= options_.max_connections) {
    over_cap_.Add();
    return Refused(over_cap_.Due(kLogPeriod, &n), n, "", peer,
                   std::to_string(options_.max_connections) + " connections open");
  }
  const std::string source = net::BudgetSource(peer);
  if (!budget_.TryAcquire(source)) {
    return Refused(budget_.RefusalsToLog(kLogPeriod, &n), n, "unauthenticated ", peer,
                   std::to_string(options_.max_handshakes) + " handshakes in progress at most, " +
                       std::to_string(options_.max_handshakes_per_source) + " from one address");
  }
  socket.set_option(tcp::no_delay(true), ec);
  const tcp protocol = remote.protocol();
  const int fd = socket.release(ec);
  if (ec) return ReleaseHandshake(source);
  StartSession(fd, Stream(protocol.family(), protocol.protocol()), peer, source, std::nullopt);
}

// A local caller: served if its credentials say it may use the agent.
void Server::Impl::OnAcceptedLocal(LocalProtocol::socket socket) {
  ++accepted_;
  ++local_;
  uint64_t n = 0;
  StatusOr<net::LocalPeer> peer = net::LocalPeerOf(socket.native_handle());
  Status allowed = !peer.ok()                 ? peer.status()
                   : options_.authorize_local ? options_.authorize_local(*peer)
                                              : PermissionDeniedError("no local caller is served");
  const std::string name = peer.ok() ? "local " + peer->Describe() : "a local caller";
  if (!allowed.ok()) {
    local_refusals_.Add();
    return Refused(local_refusals_.Due(kLogPeriod, &n), n, "local ", name,
                   std::string(allowed.message()));
  }
  if (open_.load() >= options_.max_connections) {
    over_cap_.Add();
    return Refused(over_cap_.Due(kLogPeriod, &n), n, "", name,
                   std::to_string(options_.max_connections) + " connections open");
  }
  const std::string source = "uid " + std::to_string(peer->uid);
  if (!budget_.TryAcquire(source)) {
    return Refused(budget_.RefusalsToLog(kLogPeriod, &n), n, "unauthenticated ", name,
                   "too many handshakes in progress");
  }
  ErrorCode ec;
  const int fd = socket.release(ec);
  if (ec) return ReleaseHandshake(source);
  StartSession(fd, Stream(AF_UNIX, 0), name, source, *peer);
}

void Server::Impl::StartSession(int fd, Stream protocol, std::string peer, std::string source,
                                std::optional<net::LocalPeer> local) {
  ErrorCode ec;
  Stream::socket socket(io_);
  socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return ReleaseHandshake(source);
  }
  const uint64_t id = ++next_session_;
  auto session = std::make_shared<Session>(this, id, std::move(socket), protocol, std::move(peer),
                                           std::move(source), std::move(local));
  sessions_[id] = session;
  ++open_;
  session->Start();
}

void Server::Impl::Forget(uint64_t id) {
  if (sessions_.erase(id) > 0) --open_;
}

bool Server::Impl::ReserveLong() {
  MutexLock l(&long_mu_);
  if (long_calls_ >= options_.max_long_calls) return false;
  ++long_calls_;
  return true;
}

void Server::Impl::ReleaseLong() {
  MutexLock l(&long_mu_);
  --long_calls_;
}

// `fn` must call ReleaseLong when its work is done.
bool Server::Impl::RunLong(std::function<void()> fn) {
  MutexLock l(&long_mu_);
  if (stopped_) {
    --long_calls_;
    return false;
  }
  const uint64_t id = ++next_thread_;
  long_threads_[id] = std::thread([this, id, fn = std::move(fn)] {
    fn();  // gives the slot back (ReleaseLong) once its work is done
    MutexLock done(&long_mu_);
    if (!stopped_) asio::post(io_, [this, id] { Reap(id); });  // Stop joins it otherwise
  });
  return true;
}

void Server::Impl::Reap(uint64_t thread_id) {
  std::thread t;
  {
    MutexLock l(&long_mu_);
    auto it = long_threads_.find(thread_id);
    if (it == long_threads_.end()) return;  // Stop took it
    t = std::move(it->second);
    long_threads_.erase(it);
  }
  t.join();  // it is past its last statement
}

void Server::Impl::Stop() {
  if (stopped_.exchange(true)) return;
  // Reverse order of start: accepts, workers, long calls, connections, loop.
  asio::post(io_, [this] {
    ErrorCode ignored;
    acceptor_.close(ignored);
    local_acceptor_.close(ignored);
    accept_retry_.cancel();
    local_accept_retry_.cancel();
  });
  workers_.join();
  std::map<uint64_t, std::thread> threads;
  {
    MutexLock l(&long_mu_);
    threads.swap(long_threads_);
  }
  for (auto& [id, t] : threads) t.join();
  asio::post(io_, [this] {
    auto sessions = sessions_;  // Close erases
    for (auto& [id, s] : sessions) s->Close("");
    guard_.reset();
    io_.stop();
  });
  if (loop_.joinable()) loop_.join();
}

Server::Stats Server::Impl::stats() const {
  Stats s;
  s.accepted = accepted_;
  s.authenticated = authenticated_;
  s.refused = refused_;
  s.calls = calls_;
  s.local = local_;
  s.open = open_;
  MutexLock l(&long_mu_);
  s.long_calls = long_calls_;
  return s;
}

StatusOr<std::unique_ptr<Server>> Server::Start(net::Socket listener, Options options,
                                                Handlers handlers, net::Socket local_listener) {
  auto impl = std::make_shared<Impl>(std::move(options), std::move(handlers));
  STRATA_RETURN_IF_ERROR(impl->Start(std::move(listener), std::move(local_listener)));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }
void Server::Stop() { impl_->Stop(); }
Server::Stats Server::stats() const { return impl_->stats(); }

}  // namespace strata::agent
