// Copyright 2026 The Strata Authors.
//
// Server: the agent's port. One event-loop thread (asio) owns every
// connection from accept to close: it runs TLS (net/tls.h) and then
// authenticates (net/auth.h), both as state machines over non-blocking
// reads and writes, reads calls and writes replies, so an idle or waiting
// connection costs a socket and a few kilobytes (its TLS state, whose
// buffers are freed while idle), never a thread. A call
// goes, by its op, to one of two handlers:
//
//   * a control call (coordination, status, health, ...) runs on one of a
//     few worker threads and answers through a completion, at once or later
//     (the coordinator parks a call that waits for the other nodes and
//     completes it when they have come): no thread waits with it;
//   * a long call (a step transfer, a maintenance event) takes the
//     connection's socket, blocking, on a thread of its own, and hands it
//     back when done. At most Options::max_long_calls run at once; more are
//     answered RESOURCE_EXHAUSTED (the caller retries).
//
// Local callers. A second listener, a Unix-domain socket in the agent's
// directory, serves the node's own callers (`strata status` and `strata
// maintenance` on the node, `strata run`): no TLS and no secret; the
// kernel's record of the caller's uid (SO_PEERCRED) is checked by
// Options::authorize_local before a byte is read, then a LOCAL_HELLO
// (net/auth.h) carries the protocol version and the caller's name. Calls
// that Options::local_only names are refused on every network connection,
// whoever holds the secret, and served only to local callers.
//
// Bounds: at most max_handshakes connections authenticating at once,
// max_handshakes_per_source from one address, each for auth_timeout; a
// connection over budget is closed at once. At most max_connections open
// (default: 3/4 of the descriptor limit, whose soft value Start raises to
// the hard one). An authenticated connection idle
// for idle_timeout is closed, and one whose peer does not take a reply
// within reply_timeout. Malformed, oversized or unauthenticated input
// is logged with its reason and the connection closed; the server serves on.
//
// Lifetime: Start spawns the loop and the workers; Stop (also the
// destructor) stops in reverse order: no more accepts, the workers drained,
// the long calls joined (their handler must return once the owner is
// stopping), every connection closed, the loop joined. The owner makes
// parked completions fire (Coordinator::Shutdown) before Stop; a
// completion that fires after Stop is dropped.
#ifndef STRATA_AGENT_RPC_SERVER_H_
#define STRATA_AGENT_RPC_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "agent/rpc/client.h"
#include "net/socket.h"
#include "net/tls.h"
#include "strata/status.h"

namespace strata::agent {

class Session;  // server.cc

class Server {
 public:
  struct Options {
    // The job's secret and TLS (net/tls.h): every connection is TLS 1.3
    // unless trust.tls is null, then the HMAC handshake inside it.
    net::Trust trust;
    int max_handshakes = 1024;
    int max_handshakes_per_source = 8;
    int max_long_calls = 64;
    int max_connections = 0;  // 0: 3/4 of RLIMIT_NOFILE, raised to its hard limit
    int workers = 2;
    // The largest call (request frame) accepted; a larger one closes the
    // connection with an error naming both sizes.
    uint32_t max_request_bytes = kMaxControlBytes;
    std::chrono::milliseconds auth_timeout{5000};
    // Whether a local caller (net::LocalPeer) may use the agent: OK, or why
    // not (logged; the connection is closed). Unset: none may.
    std::function<Status(const net::LocalPeer&)> authorize_local;
    // Calls accepted only from local callers (PERMISSION_DENIED, naming the
    // call, on a network connection). Unset: none is.
    std::function<bool(const json& request)> local_only;
    std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
    std::chrono::milliseconds reply_timeout{30000};
  };
  // The answer to a call, exactly once, from any thread. An answer with
  // "closed": true closes the connection without a reply.
  using Reply = std::function<void(StatusOr<json>)>;
  struct Handlers {
    // Whether `op` is a long call.
    std::function<bool(const std::string& op)> is_long;
    // A control call from `who` (the client id it authenticated with).
    std::function<void(const json& request, const std::string& who, Reply reply)> control;
    // A long call: may send and receive on `socket` before its answer.
    std::function<StatusOr<json>(const json& request, net::Socket& socket)> long_call;
  };

  // Serves `listener` (bound and listening) and, when open, the Unix-domain
  // `local_listener` (Socket::ListenLocal).
  static StatusOr<std::unique_ptr<Server>> Start(net::Socket listener, Options options,
                                                 Handlers handlers,
                                                 net::Socket local_listener = net::Socket());
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void Stop();

  struct Stats {
    uint64_t accepted = 0, authenticated = 0, refused = 0, calls = 0, local = 0;
    int open = 0, long_calls = 0;
  };
  Stats stats() const;

 private:
  friend class Session;
  class Impl;
  explicit Server(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_RPC_SERVER_H_
