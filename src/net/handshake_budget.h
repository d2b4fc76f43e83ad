// Copyright 2026 The Strata Authors.
//
// HandshakeBudget: how many connections may be authenticating at once, in
// all and from one source address. A connection holds a slot until it has
// proved it knows the job's secret (or failed to, or its handshake timed
// out); without a budget, idle connections from anyone who can reach the
// port, or a client reconnecting every few seconds, would hold every slot
// and the agent's own peers would be refused. With it, one source holds at
// most `per_source` slots, and a connection over budget is closed at once.
//
// Thread-safe.
#ifndef STRATA_NET_HANDSHAKE_BUDGET_H_
#define STRATA_NET_HANDSHAKE_BUDGET_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "util/logging.h"
#include "util/mutex.h"

namespace strata::net {

class HandshakeBudget {
 public:
  HandshakeBudget(int total, int per_source) : total_(total), per_source_(per_source) {}

  // Takes a slot for a handshake from `source` (an address without port);
  // false when the total or the source's share is spent.
  bool TryAcquire(const std::string& source);
  // Gives back a slot TryAcquire granted for `source`.
  void Release(const std::string& source);

  // Whether to log the refusals now: after the first one, then at most once
  // every `every`; *count is how many were refused since the last line.
  bool RefusalsToLog(std::chrono::steady_clock::duration every, uint64_t* count);

 private:
  const int total_;
  const int per_source_;
  Mutex mu_;
  int in_use_ GUARDED_BY(mu_) = 0;
  std::map<std::string, int> by_source_ GUARDED_BY(mu_);
  LogLimiter refusals_;
};

// The address part of "host:port" or "[v6]:port" (the whole text if it has
// no port).
std::string SourceAddress(std::string_view peer);

// What the budget counts `peer` ("host:port" or "[v6]:port") by: its IPv4
// address, or its IPv6 address's /64 ("2001:db8:1:2::/64"): one host, or one
// site's subnet, has millions of IPv6 addresses but one /64, so its share
// stays per_source however many it uses. An IPv4-mapped IPv6 address counts
// as its IPv4 address.
std::string BudgetSource(std::string_view peer);

}  // namespace strata::net

#endif  // STRATA_NET_HANDSHAKE_BUDGET_H_
