// Copyright 2026 The Strata Authors.
//
// Helpers for tests that run the agent's components in one process.
#ifndef STRATA_TESTS_HARNESS_COMPONENT_UTIL_H_
#define STRATA_TESTS_HARNESS_COMPONENT_UTIL_H_

#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "agent/peer/replication.h"
#include "agent/rpc/server.h"
#include "format/sync_map.h"
#include "net/tls.h"
#include "wire/op.h"

namespace strata::testing {

// `hooks` with each hook left unset filled in by one that does nothing: no
// incarnation (so nothing is sent), no on-demand step, no pins, no backup
// cadence. call_coordinator stays as given (it is only called for a target).
inline agent::Replication::Hooks IdleReplicationHooks(agent::Replication::Hooks hooks = {}) {
  using agent::Replication;
  if (!hooks.target) hooks.target = [] { return std::optional<Replication::Target>(); };
  if (!hooks.priority_step) hooks.priority_step = [] { return kNoSyncStep; };
  if (!hooks.pins) hooks.pins = [] { return std::set<wire::StepKey>(); };
  if (!hooks.on_replica) hooks.on_replica = [](const wire::StepKey&, uint64_t) {};
  if (!hooks.cadence) {
    hooks.cadence = [](const agent::ReplicatorConfig&) { return wire::Cadence(); };
  }
  if (!hooks.on_reply) {
    hooks.on_reply = [](const agent::ReplicatorConfig&, const wire::ReplicatedRequest&,
                        const wire::ReplicatedReply&) {};
  }
  return hooks;
}

// The trust agents use by default: TLS 1.3 keyed by `secret`.
inline net::Trust PskTrust(const std::string& secret) {
  StatusOr<net::Trust> trust = net::MakeTrust(secret, net::TlsOptions{});
  if (!trust.ok()) std::abort();
  return *trust;
}

// A real Server on a free loopback port (the port of *address where it is
// set: a server restarted where the last one listened), protected as
// `trust` says, routing as the agent does (wire::IsLongCall) to `handlers`;
// control calls are refused unless handlers.control is set. Its host:port
// goes to *address.
inline StatusOr<std::unique_ptr<agent::Server>> ServeOnLoopback(const net::Trust& trust,
                                                                agent::Server::Handlers handlers,
                                                                std::string* address) {
  uint16_t at = 0;
  if (!address->empty()) {
    STRATA_ASSIGN_OR_RETURN(net::Endpoint was, net::ParseEndpoint(*address));
    at = was.port;
  }
  STRATA_ASSIGN_OR_RETURN(net::Socket listener, net::Socket::Listen("127.0.0.1", at, 64));
  STRATA_ASSIGN_OR_RETURN(uint16_t port, listener.LocalPort());
  *address = "127.0.0.1:" + std::to_string(port);
  agent::Server::Options options;
  options.trust = trust;
  handlers.is_long = [](const std::string& name) { return wire::IsLongCall(name); };
  if (!handlers.control) {
    handlers.control = [](const agent::json&, const std::string&, agent::Server::Reply reply) {
      reply(UnimplementedError("no control calls here"));
    };
  }
  return agent::Server::Start(std::move(listener), options, std::move(handlers));
}

// The same, with TLS keyed by `secret` (the agents' default).
inline StatusOr<std::unique_ptr<agent::Server>> ServeOnLoopback(const std::string& secret,
                                                                agent::Server::Handlers handlers,
                                                                std::string* address) {
  return ServeOnLoopback(PskTrust(secret), std::move(handlers), address);
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_COMPONENT_UTIL_H_
