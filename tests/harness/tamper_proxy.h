// Copyright 2026 The Strata Authors.
//
// TamperProxy: a man in the middle between agents. A TCP relay on
// 127.0.0.1 in front of an agent's port that records every byte it carries
// and, when told, attacks one connection:
//
//   FlipUpstreamByte(at)      XORs one bit of the at-th byte a client sends
//                             (counted per connection), on the first
//                             connection to get that far
//   TruncateUpstreamAfter(n)  forwards a client's first n bytes, then closes
//                             both sides, on the first connection to get
//                             that far
//
// Upstream(i) is what client i sent, Downstream(i) what the server answered
// (connections numbered from 0 in accept order); Replay sends recorded bytes
// on a fresh connection to the server, as an attacker who captured them.
// One thread per direction and connection. Thread-safe.
#ifndef STRATA_TESTS_HARNESS_TAMPER_PROXY_H_
#define STRATA_TESTS_HARNESS_TAMPER_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "strata/status.h"

namespace strata::testing {

class TamperProxy {
 public:
  // In front of 127.0.0.1:upstream_port; listens at once.
  static StatusOr<std::unique_ptr<TamperProxy>> Start(int upstream_port);
  ~TamperProxy();  // closes every connection, joins every thread
  TamperProxy(const TamperProxy&) = delete;
  TamperProxy& operator=(const TamperProxy&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void FlipUpstreamByte(uint64_t at) { flip_at_ = static_cast<int64_t>(at); }
  void TruncateUpstreamAfter(uint64_t n) { truncate_after_ = static_cast<int64_t>(n); }
  // Whether the armed attack has happened.
  bool flipped() const { return flipped_; }
  bool truncated() const { return truncated_; }

  size_t connections() const;
  std::string Upstream(size_t connection) const { return Recorded(connection, true); }
  std::string Downstream(size_t connection) const { return Recorded(connection, false); }
  // Everything either side sent, on every connection.
  std::string AllBytes() const;

  // Connects to the server, sends `bytes` and returns what it answers until
  // it closes the connection (or 5 s pass).
  StatusOr<std::string> Replay(const std::string& bytes) const;

 private:
  struct Link;
  explicit TamperProxy(int upstream_port) : upstream_port_(upstream_port) {}
  std::string Recorded(size_t connection, bool upstream) const;
  void AcceptLoop();
  void Pump(std::shared_ptr<Link> link, bool upstream);
  // Applies the armed attacks to `n` bytes at `offset` of a client's
  // stream; returns how many to forward (fewer: truncate after them).
  size_t Attack(char* data, size_t n, uint64_t offset);

  const int upstream_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> flip_at_{-1}, truncate_after_{-1};
  std::atomic<bool> flipped_{false}, truncated_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Link>> links_;  // guarded by mu_
  std::vector<std::thread> pumps_;            // guarded by mu_
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_TAMPER_PROXY_H_
