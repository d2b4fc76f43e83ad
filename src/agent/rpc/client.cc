// Copyright 2026 The Strata Authors.
#include "agent/rpc/client.h"

#include <utility>

#include "net/auth.h"
#include "net/frame.h"
#include "util/json_bounded.h"
#include "wire/json.h"

namespace strata::agent {
namespace {

constexpr auto kReplyTimeout = std::chrono::seconds(30);

}  // namespace

StatusOr<RpcClient> RpcClient::Connect(const Endpoint& to, const net::Trust& trust,
                                       const std::string& client_id,
                                       std::chrono::milliseconds timeout) {
  RpcClient c;
  c.peer_ = to.ToString();
  const net::Deadline deadline = net::DeadlineAfter(timeout);
  STRATA_ASSIGN_OR_RETURN(c.socket_, net::Socket::Connect(to.host, to.port, timeout));
  STRATA_RETURN_IF_ERROR(net::SecureAsClient(c.socket_, trust, client_id, to.host, deadline));
  return c;
}

StatusOr<RpcClient> RpcClient::ConnectLocal(const std::string& path, const std::string& client_id,
                                            std::chrono::milliseconds timeout) {
  RpcClient c;
  c.peer_ = path;
  const net::Deadline deadline = net::DeadlineAfter(timeout);
  STRATA_ASSIGN_OR_RETURN(c.socket_, net::Socket::ConnectLocal(path, timeout));
  STRATA_RETURN_IF_ERROR(net::AuthenticateLocally(c.socket_, client_id, deadline));
  return c;
}

StatusOr<json> RpcClient::Call(const json& request, std::chrono::milliseconds timeout) {
  answered_ = false;
  auto deadline = net::DeadlineAfter(timeout);
  STRATA_RETURN_IF_ERROR(net::SendFrame(socket_, kFrameCall, request.dump(), deadline));
  STRATA_ASSIGN_OR_RETURN(net::Frame f, net::RecvFrame(socket_, kMaxControlBytes, deadline));
  if (f.type != kFrameReply) return InvalidArgumentError(peer_ + " sent an unexpected frame");
  json reply = ParseBounded(f.payload);
  if (!reply.is_object()) return InvalidArgumentError(peer_ + " sent a reply that is not JSON");
  answered_ = true;
  STRATA_RETURN_IF_ERROR(wire::StatusFromJson(reply, peer_));
  return reply;
}

RpcPool::RpcPool(net::Trust trust, size_t max_idle)
    : trust_(std::move(trust)), max_idle_(max_idle) {}

std::optional<RpcClient> RpcPool::TakeIdle(const std::string& key) {
  MutexLock l(&mu_);
  auto it = idle_.find(key);
  if (it == idle_.end() || it->second.empty()) return std::nullopt;
  RpcClient c = std::move(it->second.back());
  it->second.pop_back();
  return c;
}

void RpcPool::GiveBack(const std::string& key, RpcClient client) {
  MutexLock l(&mu_);
  auto& idle = idle_[key];
  if (idle.size() < max_idle_) idle.push_back(std::move(client));
}

StatusOr<json> RpcPool::Call(const Endpoint& to, const std::string& client_id, const json& request,
                             std::chrono::milliseconds timeout) {
  STRATA_ASSIGN_OR_RETURN(Opened opened, Open(to, client_id, request, timeout, timeout));
  if (opened.client.answered()) GiveBack(to, client_id, std::move(opened.client));
  return std::move(opened.reply);
}

namespace {

// `client`'s call, its socket registered for `ticket` meanwhile.
StatusOr<json> CallFor(RpcClient& client, const json& request, std::chrono::milliseconds timeout,
                       const net::Cancellation::Ticket& ticket) {
  const net::Cancellation::Registration registered(ticket, client.socket());
  return client.Call(request, timeout);
}

Status Cancelled(const Endpoint& to) {
  return CancelledError("a call to " + to.ToString() + ": cancelled");
}

}  // namespace

StatusOr<RpcPool::Opened> RpcPool::Open(const Endpoint& to, const std::string& client_id,
                                        const json& request, std::chrono::milliseconds timeout,
                                        std::chrono::milliseconds reused_timeout,
                                        const net::Cancellation::Ticket& ticket) {
  if (ticket.cancelled()) return Cancelled(to);  // a kept connection stays kept
  if (std::optional<RpcClient> reused = TakeIdle(Key(to, client_id))) {
    StatusOr<json> r = CallFor(*reused, request, reused_timeout, ticket);
    if (reused->answered() || ticket.cancelled()) return Opened{std::move(*reused), std::move(r)};
    // The server may have closed it meanwhile (idle timeout, restart), or a
    // partition cut it: a call that was not answered is safe to make again,
    // on a new connection.
  }
  STRATA_ASSIGN_OR_RETURN(RpcClient fresh, RpcClient::Connect(to, trust_, client_id));
  if (ticket.cancelled()) return Cancelled(to);
  StatusOr<json> r = CallFor(fresh, request, timeout, ticket);
  return Opened{std::move(fresh), std::move(r)};
}

void RpcPool::Clear() {
  MutexLock l(&mu_);
  idle_.clear();
}

Status SendReply(net::Socket& socket, const json& reply) {
  return net::SendFrame(socket, kFrameReply, reply.dump(), net::DeadlineAfter(kReplyTimeout));
}

}  // namespace strata::agent
