// Copyright 2026 The Strata Authors.
#include "fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace strata::testing {
namespace {

constexpr int kPollMs = 50;
constexpr char kSlowDown[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please "
    "reduce your request rate.</Message><RequestId>fault-proxy</RequestId></Error>";

bool Take(std::atomic<int>& counter) {
  int v = counter.load();
  while (v > 0 && !counter.compare_exchange_weak(v, v - 1)) {
  }
  return v > 0;
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void SetReset(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

uint64_t ContentLength(const std::string& headers) {
  std::string lower = headers;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto p = lower.find("\ncontent-length:");
  return p == std::string::npos ? 0 : std::strtoull(lower.c_str() + p + 16, nullptr, 10);
}

int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

FaultProxy::~FaultProxy() { Stop(); }

Status FaultProxy::Start() {
  if (listen_fd_ >= 0) return FailedPreconditionError("fault proxy already listening");
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "fault proxy: listen on port " + std::to_string(port_));
  }
  port_ = ntohs(a.sin_port);
  listen_fd_ = fd;
  stopping_ = false;
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void FaultProxy::Stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  listen_fd_ = -1;
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mu_);
    for (int fd : open_fds_) {
      SetReset(fd);
      ::shutdown(fd, SHUT_RDWR);
    }
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
}

void FaultProxy::Track(int fd) {
  std::lock_guard lock(mu_);
  open_fds_.insert(fd);
}

void FaultProxy::Untrack(int fd) {
  std::lock_guard lock(mu_);
  open_fds_.erase(fd);
  ::close(fd);
}

void FaultProxy::AcceptLoop() {
  while (!Stopping()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    ++connections_;
    Track(client);
    std::lock_guard lock(mu_);
    workers_.emplace_back([this, client] { Serve(client); });
  }
}

void FaultProxy::Serve(int client) {
  // Read the request headers.
  std::string buf;
  size_t header_end = std::string::npos;
  char tmp[64 << 10];
  while (header_end == std::string::npos && !Stopping()) {
    pollfd p{client, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    ssize_t n = ::recv(client, tmp, sizeof(tmp), 0);
    if (n <= 0) break;
    buf.append(tmp, static_cast<size_t>(n));
    header_end = buf.find("\r\n\r\n");
  }
  if (header_end == std::string::npos) return Untrack(client);
  header_end += 4;

  if (Take(fail_next_)) {
    uint64_t left = ContentLength(buf.substr(0, header_end));
    left -= std::min<uint64_t>(left, buf.size() - header_end);
    while (left > 0 && !Stopping()) {
      ssize_t n = ::recv(client, tmp, std::min<uint64_t>(left, sizeof(tmp)), 0);
      if (n <= 0) break;
      left -= static_cast<uint64_t>(n);
    }
    std::string body = kSlowDown;
    std::string resp =
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    SendAll(client, resp.data(), resp.size());
    ++failed_;
    return Untrack(client);
  }
  if (Take(delay_next_)) {
    ++delayed_;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms_.load());
    while (!Stopping() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  uint64_t reset_after = Take(reset_next_) ? std::max<uint64_t>(reset_after_, 1) : 0;
  int server = ConnectLoopback(upstream_port_);
  if (server < 0 || Stopping()) {
    if (server >= 0) ::close(server);
    SetReset(client);
    return Untrack(client);
  }
  Track(server);
  Relay(client, server, std::move(buf), reset_after);
  Untrack(server);
  Untrack(client);
}

void FaultProxy::Relay(int client, int server, std::string pending, uint64_t reset_after) {
  uint64_t up = 0;  // client bytes forwarded on this connection
  auto forward_up = [&](const char* p, size_t n) {
    bool reset = reset_after > 0 && up + n >= reset_after;
    if (reset) n = static_cast<size_t>(reset_after - up);
    bool ok = SendAll(server, p, n);
    up += n;
    bytes_up_ += n;
    if (reset) {
      ++resets_;
      SetReset(client);
      SetReset(server);
      return false;
    }
    return ok;
  };
  if (!forward_up(pending.data(), pending.size())) return;
  bool client_open = true, server_open = true;
  std::vector<char> buf(256 << 10);
  while (!Stopping() && (client_open || server_open)) {
    pollfd p[2] = {{client, static_cast<short>(client_open ? POLLIN : 0), 0},
                   {server, static_cast<short>(server_open ? POLLIN : 0), 0}};
    if (::poll(p, 2, kPollMs) <= 0) continue;
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(client, buf.data(), buf.size(), 0);
      if (n <= 0) {
        client_open = false;
        ::shutdown(server, SHUT_WR);
      } else if (!forward_up(buf.data(), static_cast<size_t>(n))) {
        return;
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(server, buf.data(), buf.size(), 0);
      if (n <= 0) {
        server_open = false;
        ::shutdown(client, SHUT_WR);
        return;  // the response is complete (moto closes after each one)
      }
      if (!SendAll(client, buf.data(), static_cast<size_t>(n))) return;
    }
  }
}

}  // namespace strata::testing
