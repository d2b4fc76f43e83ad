// Copyright 2026 The Strata Authors.
//
// MetricsServer: `strata agent --metrics HOST:PORT`. Serves the process's
// metrics registry (util/metrics.h) over HTTP/1.1 for Prometheus to scrape:
// GET /metrics answers 200 in the text format (version 0.0.4), GET / a line
// pointing there, anything else 404 (405 for another method). One connection
// at a time, closed after each answer; a client has 5 s to send its request.
// Start() binds before it returns, so a port in use is an error at start.
#ifndef STRATA_AGENT_METRICS_METRICS_SERVER_H_
#define STRATA_AGENT_METRICS_METRICS_SERVER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include "net/socket.h"
#include "strata/status.h"
#include "util/metrics.h"

namespace strata::agent {

// What the server reads of a request: the first line's method and path (its
// query dropped), from the request head as received (anything a client
// sends; never longer than 16 KiB).
struct HttpRequestLine {
  std::string_view method;
  std::string_view path;
};
HttpRequestLine ParseRequestLine(std::string_view head);
// The status the server answers with: 200 for GET or HEAD of /metrics or /,
// 404 for another path, 405 for another method.
int AnswerStatus(const HttpRequestLine& line);

class MetricsServer {
 public:
  explicit MetricsServer(metrics::Registry* registry) : registry_(registry) {}
  ~MetricsServer() { Stop(); }
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on host:port (port 0: any free one, see port()) and serves on a
  // thread of its own until Stop().
  Status Start(const std::string& host, uint16_t port);
  void Stop();
  uint16_t port() const { return port_; }

 private:
  void Serve();
  void Answer(net::Socket& client);

  metrics::Registry* const registry_;
  net::Socket listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_METRICS_METRICS_SERVER_H_
