// Copyright 2026 The Strata Authors.
//
// FaultProxy: a TCP proxy on 127.0.0.1 in front of an HTTP server (moto) that
// injects the failures an object store client must survive:
//
//   FailNext(n)         the next n requests get "HTTP/1.1 503 Slow Down" with
//                       S3's SlowDown XML body and Connection: close (the
//                       request body is read and dropped first)
//   DelayNext(n, d)     the next n requests are forwarded only after d
//   ResetNext(n, b)     the next n requests are forwarded for b bytes
//                       (headers included), then both sides get a TCP RST
//   Stop() / Start()    close the listener and every connection / listen
//                       again on the same port (a server killed and restarted)
//
// Faults apply per connection, to its first request: moto closes every
// connection after one response, so a connection is a request there. Other
// traffic passes through unchanged. One thread per connection.
// Thread-safe.
#ifndef STRATA_TESTS_HARNESS_FAULT_PROXY_H_
#define STRATA_TESTS_HARNESS_FAULT_PROXY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "strata/status.h"

namespace strata::testing {

class FaultProxy {
 public:
  explicit FaultProxy(int upstream_port) : upstream_port_(upstream_port) {}
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // Listens: on a free port the first time, on the same port afterwards.
  Status Start();
  // Stops listening and closes every open connection (clients see a reset
  // or a refused connection). Returns when all connection threads are done.
  void Stop();

  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void FailNext(int n) { fail_next_ = n; }
  void DelayNext(int n, std::chrono::milliseconds d) {
    delay_ms_ = d.count();
    delay_next_ = n;
  }
  void ResetNext(int n, uint64_t after_bytes) {
    reset_after_ = after_bytes;
    reset_next_ = n;
  }

  // Counters since construction.
  uint64_t connections() const { return connections_; }
  uint64_t failed() const { return failed_; }      // 503s sent
  uint64_t delayed() const { return delayed_; }    // requests delayed
  uint64_t resets() const { return resets_; }      // connections reset
  uint64_t bytes_up() const { return bytes_up_; }  // client -> server bytes forwarded

 private:
  void AcceptLoop();
  void Serve(int client);
  void Relay(int client, int server, std::string pending, uint64_t reset_after);
  bool Stopping() const { return stopping_; }
  void Track(int fd);
  void Untrack(int fd);

  const int upstream_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;  // guarded by mu_
  std::set<int> open_fds_;            // guarded by mu_

  std::atomic<int> fail_next_{0}, delay_next_{0}, reset_next_{0};
  std::atomic<int64_t> delay_ms_{0};
  std::atomic<uint64_t> reset_after_{0};
  std::atomic<uint64_t> connections_{0}, failed_{0}, delayed_{0}, resets_{0}, bytes_up_{0};
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_FAULT_PROXY_H_
