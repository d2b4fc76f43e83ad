// Copyright 2026 The Strata Authors.
#include "agent/metrics/metrics_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include "util/logging.h"

namespace strata::agent {

namespace {

constexpr auto kRequestTimeout = std::chrono::seconds(5);
constexpr size_t kMaxRequestBytes = 16 << 10;

// Reads until the end of the request's head. The error says why not (a
// client too slow, gone, or sending an oversized head) and after how much.
Status ReadHead(net::Socket& s, std::string* head) {
  auto deadline = std::chrono::steady_clock::now() + kRequestTimeout;
  char buf[4096];
  auto failed = [&](const std::string& why) {
    return UnavailableError("reading a request from " + s.peer() + ": " + why + " after " +
                            std::to_string(head->size()) + " bytes");
  };
  while (head->find("\r\n\r\n") == std::string::npos) {
    if (head->size() > kMaxRequestBytes) return failed("a head over 16 KiB");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return failed("timed out");
    pollfd p{s.fd(), POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return failed(std::string("poll: ") + std::strerror(errno));
    if (ready == 0) continue;  // the deadline decides
    ssize_t n = ::recv(s.fd(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed(std::string("recv: ") + std::strerror(errno));
    if (n == 0) return failed("closed");
    head->append(buf, static_cast<size_t>(n));
  }
  return Status::Ok();
}

std::string Response(int code, std::string_view reason, std::string_view type,
                     const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) +
         "\r\nContent-Type: " + std::string(type) +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

HttpRequestLine ParseRequestLine(std::string_view head) {
  std::string_view line = head.substr(0, head.find("\r\n"));
  HttpRequestLine r;
  r.method = line.substr(0, line.find(' '));
  std::string_view rest = line.substr(std::min(line.size(), r.method.size() + 1));
  r.path = rest.substr(0, rest.find(' '));
  r.path = r.path.substr(0, r.path.find('?'));
  return r;
}

int AnswerStatus(const HttpRequestLine& line) {
  if (line.method != "GET" && line.method != "HEAD") return 405;
  return line.path == "/metrics" || line.path == "/" ? 200 : 404;
}

Status MetricsServer::Start(const std::string& host, uint16_t port) {
  STRATA_ASSIGN_OR_RETURN(listener_, net::Socket::Listen(host, port, 16));
  STRATA_ASSIGN_OR_RETURN(port_, listener_.LocalPort());
  stop_ = false;
  thread_ = std::thread([this] { Serve(); });
  return Status::Ok();
}

void MetricsServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  listener_.Close();
}

void MetricsServer::Serve() {
  while (!stop_) {
    auto client = listener_.Accept(std::chrono::milliseconds(200));
    if (!client.ok()) {
      if (client.status().code() != StatusCode::kDeadlineExceeded) {
        Log()->warn("metrics: accept: {}", client.status().ToString());
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      continue;
    }
    Answer(*client);
  }
}

void MetricsServer::Answer(net::Socket& client) {
  std::string head;
  if (Status s = ReadHead(client, &head); !s.ok()) {  // nothing to answer
    Log()->debug("metrics: {}", s.message());
    return;
  }
  const HttpRequestLine line = ParseRequestLine(head);
  std::string out;
  switch (AnswerStatus(line)) {
    case 405:
      out = Response(405, "Method Not Allowed", "text/plain", "only GET\n");
      break;
    case 404:
      out = Response(404, "Not Found", "text/plain", "no such page; metrics at /metrics\n");
      break;
    default:
      out =
          line.path == "/metrics"
              ? Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", registry_->Render())
              : Response(200, "OK", "text/plain", "strata agent: metrics at /metrics\n");
  }
  if (line.method == "HEAD") out.resize(out.find("\r\n\r\n") + 4);
  Status s = client.SendAll(out.data(), out.size(), net::DeadlineAfter(kRequestTimeout));
  if (!s.ok()) Log()->debug("metrics: answering {}: {}", client.peer(), s.ToString());
}

}  // namespace strata::agent
