// Copyright 2026 The Strata Authors.
//
// Calls between agents (and from `strata status`): a request frame carrying
// JSON {"op": ..., ...} answered by a reply frame carrying JSON {"ok": true,
// ...} or {"ok": false, "code": ..., "error": ...} (wire/json.h). Every
// connection is TLS 1.3 unless the job turned it off (net/tls.h), and
// authenticated first (net/auth.h). The bytes of a step that
// follow some calls are rpc/step_stream.h.
#ifndef STRATA_AGENT_RPC_CLIENT_H_
#define STRATA_AGENT_RPC_CLIENT_H_

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "net/cancellation.h"
#include "net/endpoint.h"
#include "net/socket.h"
#include "net/tls.h"
#include "strata/status.h"
#include "util/mutex.h"
#include "wire/json.h"

namespace strata::agent {

using json = nlohmann::json;

// How long a call waits for its reply (a coordinator call's waits inside
// it, wait_ms, are shorter; step data has its own deadline, DataDeadline).
inline constexpr auto kCallTimeout = std::chrono::seconds(30);

inline constexpr uint16_t kFrameCall = 16;
inline constexpr uint16_t kFrameReply = 17;
// Control messages are small; step data never travels in a frame.
inline constexpr uint32_t kMaxControlBytes = 16u << 20;

using net::Endpoint;
using net::ParseEndpoint;

// An authenticated connection to another agent. Used by one thread at a time.
class RpcClient {
 public:
  static StatusOr<RpcClient> Connect(const Endpoint& to, const net::Trust& trust,
                                     const std::string& client_id,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // To the agent of this node through its Unix-domain socket at `path`
  // (<local>/.strata-agent/agent.sock): no secret, the agent checks this
  // process's uid (server.h, "Local callers").
  static StatusOr<RpcClient> ConnectLocal(
      const std::string& path, const std::string& client_id,
      std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Sends a call and waits up to `timeout` for its reply. A reply with
  // ok=false becomes a Status with the remote code and message.
  StatusOr<json> Call(const json& request, std::chrono::milliseconds timeout);
  net::Socket& socket() { return socket_; }
  const std::string& peer() const { return peer_; }
  // Whether the last Call got its reply (ok or not): the connection is in
  // step and may carry another call. After a failure to send or receive,
  // close it.
  bool answered() const { return answered_; }

 private:
  net::Socket socket_;
  std::string peer_;
  bool answered_ = false;
};

// Connections kept open between calls, for a caller that calls the same
// agents often (every agent its coordinator): a call takes an idle
// connection to its target or opens one, and gives it back once answered;
// a kept connection that turns out closed is replaced once. Only for calls
// that are safe to repeat (every coordination call is). Thread-safe; a
// connection serves one call at a time.
class RpcPool {
 public:
  explicit RpcPool(net::Trust trust, size_t max_idle = 4);
  // A call to `to` as `client_id` (see RpcClient::Connect).
  StatusOr<json> Call(const Endpoint& to, const std::string& client_id, const json& request,
                      std::chrono::milliseconds timeout);
  void Clear();  // closes the idle connections

  // A call whose connection the caller goes on using (a transfer follows
  // it): made on a kept connection to `to` if one is idle (answered within
  // `reused_timeout`), else, or when that one turns out closed, on a new
  // one (within `timeout`). The connection comes with the reply; GiveBack
  // it once in step (its last reply read), or drop it. The call is
  // registered for `ticket`: once that is cancelled, nothing more begins
  // (Cancelled) and a call under way fails; a connection that comes back
  // after the cancel may have been aborted even with its reply read, so the
  // caller drops it whatever the reply.
  struct Opened {
    RpcClient client;
    StatusOr<json> reply;
  };
  StatusOr<Opened> Open(const Endpoint& to, const std::string& client_id, const json& request,
                        std::chrono::milliseconds timeout, std::chrono::milliseconds reused_timeout,
                        const net::Cancellation::Ticket& ticket = {});
  void GiveBack(const Endpoint& to, const std::string& client_id, RpcClient client) {
    GiveBack(Key(to, client_id), std::move(client));
  }

 private:
  static std::string Key(const Endpoint& to, const std::string& client_id) {
    return to.ToString() + " " + client_id;
  }
  std::optional<RpcClient> TakeIdle(const std::string& key);
  void GiveBack(const std::string& key, RpcClient client);

  const net::Trust trust_;
  const size_t max_idle_;
  Mutex mu_;
  // By "host:port client-id".
  std::map<std::string, std::vector<RpcClient>> idle_ GUARDED_BY(mu_);
};

// A long call's reply frame (its first; the call's return value is its last).
Status SendReply(net::Socket& socket, const json& reply);

}  // namespace strata::agent

#endif  // STRATA_AGENT_RPC_CLIENT_H_
