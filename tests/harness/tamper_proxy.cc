// Copyright 2026 The Strata Authors.
#include "tamper_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace strata::testing {
namespace {

StatusOr<int> ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "connect to 127.0.0.1:" + std::to_string(port));
  }
  return fd;
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

// One proxied connection: the client's socket, the server's, and what each
// side sent.
struct TamperProxy::Link {
  int client = -1, server = -1;
  std::mutex mu;
  std::string up, down;  // guarded by mu
  ~Link() {
    ::close(client);
    ::close(server);
  }
};

StatusOr<std::unique_ptr<TamperProxy>> TamperProxy::Start(int upstream_port) {
  std::unique_ptr<TamperProxy> p(new TamperProxy(upstream_port));
  p->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return ErrnoToStatus(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(p->listen_fd_, 64) != 0 ||
      ::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return ErrnoToStatus(errno, "tamper proxy: listen");
  }
  p->port_ = ntohs(a.sin_port);
  p->acceptor_ = std::thread([q = p.get()] { q->AcceptLoop(); });
  return p;
}

TamperProxy::~TamperProxy() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> pumps;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& link : links_) {
      ::shutdown(link->client, SHUT_RDWR);
      ::shutdown(link->server, SHUT_RDWR);
    }
    pumps.swap(pumps_);
  }
  for (auto& t : pumps) t.join();
}

void TamperProxy::AcceptLoop() {
  while (!stopping_) {
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    auto link = std::make_shared<Link>();
    link->client = client;
    StatusOr<int> server = ConnectLoopback(upstream_port_);
    if (!server.ok()) continue;  // the client sees its connection closed
    link->server = *server;
    std::lock_guard<std::mutex> l(mu_);
    links_.push_back(link);
    pumps_.emplace_back([this, link] { Pump(link, true); });
    pumps_.emplace_back([this, link] { Pump(link, false); });
  }
}

void TamperProxy::Pump(std::shared_ptr<Link> link, bool upstream) {
  const int from = upstream ? link->client : link->server;
  const int to = upstream ? link->server : link->client;
  char buf[64 << 10];
  uint64_t offset = 0;
  for (;;) {
    const ssize_t r = ::recv(from, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t n = static_cast<size_t>(r);
    const size_t forward = upstream ? Attack(buf, n, offset) : n;
    {
      std::lock_guard<std::mutex> l(link->mu);
      (upstream ? link->up : link->down).append(buf, forward);
    }
    offset += n;
    if (!SendAll(to, buf, forward) || forward < n) break;
  }
  // Either side's end (or the attack) ends the connection for both.
  ::shutdown(link->client, SHUT_RDWR);
  ::shutdown(link->server, SHUT_RDWR);
}

size_t TamperProxy::Attack(char* data, size_t n, uint64_t offset) {
  const int64_t flip = flip_at_.load();
  if (flip >= 0 && static_cast<uint64_t>(flip) >= offset &&
      static_cast<uint64_t>(flip) < offset + n && !flipped_.exchange(true)) {
    data[static_cast<uint64_t>(flip) - offset] ^= 0x01;
  }
  const int64_t cut = truncate_after_.load();
  if (cut >= 0 && static_cast<uint64_t>(cut) < offset + n && !truncated_.exchange(true)) {
    return static_cast<uint64_t>(cut) > offset ? static_cast<size_t>(cut - offset) : 0;
  }
  return n;
}

size_t TamperProxy::connections() const {
  std::lock_guard<std::mutex> l(mu_);
  return links_.size();
}

std::string TamperProxy::Recorded(size_t connection, bool upstream) const {
  std::shared_ptr<Link> link;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (connection >= links_.size()) return "";
    link = links_[connection];
  }
  std::lock_guard<std::mutex> l(link->mu);
  return upstream ? link->up : link->down;
}

std::string TamperProxy::AllBytes() const {
  std::string all;
  for (size_t i = 0; i < connections(); ++i) all += Upstream(i) + Downstream(i);
  return all;
}

StatusOr<std::string> TamperProxy::Replay(const std::string& bytes) const {
  STRATA_ASSIGN_OR_RETURN(int fd, ConnectLoopback(upstream_port_));
  std::string answer;
  SendAll(fd, bytes.data(), bytes.size());  // the server may close before it took all
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    answer.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return answer;
}

}  // namespace strata::testing
