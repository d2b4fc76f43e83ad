// Copyright 2026 The Strata Authors.
//
// Where an agent listens: the one host:port type of the project, with its one
// parser. Configuration (--listen, --coordinator, the yaml's master), the
// command line (--agent) and the protocol (addresses in plans and replies)
// all read and write addresses through it.
#ifndef STRATA_NET_ENDPOINT_H_
#define STRATA_NET_ENDPOINT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::net {

struct Endpoint {
  std::string host;  // a name or an IPv4/IPv6 literal, without brackets
  uint16_t port = 0;

  // "host:port", or "[v6]:port" when host contains ':'.
  std::string ToString() const;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// Accepts "host:port", "[v6-literal]:port", either with an optional "tcp://".
// The host is required (a name of letters, digits, '.', '-', '_', at most
// 253 bytes, or a bracketed IPv6 literal); the port is decimal in 1..65535.
// Errors are INVALID_ARGUMENT: the (sanitized, truncated) text in quotes,
// "is not host:port" and the reason.
StatusOr<Endpoint> ParseEndpoint(std::string_view text);

}  // namespace strata::net

#endif  // STRATA_NET_ENDPOINT_H_
