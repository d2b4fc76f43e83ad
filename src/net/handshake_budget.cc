// Copyright 2026 The Strata Authors.
#include "net/handshake_budget.h"

#include <arpa/inet.h>

#include <cstring>

namespace strata::net {

bool HandshakeBudget::TryAcquire(const std::string& source) {
  MutexLock l(&mu_);
  int& mine = by_source_[source];
  if (in_use_ >= total_ || mine >= per_source_) {
    if (mine == 0) by_source_.erase(source);
    refusals_.Add();
    return false;
  }
  ++mine;
  ++in_use_;
  return true;
}

void HandshakeBudget::Release(const std::string& source) {
  MutexLock l(&mu_);
  auto it = by_source_.find(source);
  if (it == by_source_.end()) return;
  --in_use_;
  if (--it->second == 0) by_source_.erase(it);
}

bool HandshakeBudget::RefusalsToLog(std::chrono::steady_clock::duration every, uint64_t* count) {
  return refusals_.Due(every, count);
}

std::string SourceAddress(std::string_view peer) {
  if (peer.starts_with('[')) {
    size_t close = peer.find(']');
    return std::string(close == std::string_view::npos ? peer : peer.substr(1, close - 1));
  }
  size_t colon = peer.rfind(':');
  if (colon == std::string_view::npos || peer.find(':') != colon) return std::string(peer);
  return std::string(peer.substr(0, colon));
}

std::string BudgetSource(std::string_view peer) {
  const std::string address = SourceAddress(peer);
  in6_addr a6;
  if (::inet_pton(AF_INET6, address.c_str(), &a6) != 1) return address;  // IPv4, or a name
  char text[INET6_ADDRSTRLEN];
  if (IN6_IS_ADDR_V4MAPPED(&a6)) {
    return ::inet_ntop(AF_INET, &a6.s6_addr[12], text, sizeof text) ? text : address;
  }
  std::memset(&a6.s6_addr[8], 0, 8);  // the interface identifier: the host's to choose
  if (::inet_ntop(AF_INET6, &a6, text, sizeof text) == nullptr) return address;
  return std::string(text) + "/64";
}

}  // namespace strata::net
