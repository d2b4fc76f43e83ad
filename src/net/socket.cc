// Copyright 2026 The Strata Authors.
#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "net/endpoint.h"
#include "util/unique_fd.h"

namespace strata::net {
namespace {

using Clock = std::chrono::steady_clock;

// Bounce buffer for RecvToFile and the pread fallback of SendFile: large
// enough to amortise system calls, small enough to stay in the CPU caches
// between the two copies.
constexpr uint64_t kCopyBufferSize = 1 << 20;
// sendfile(2) moves at most 0x7ffff000 bytes per call.
constexpr uint64_t kMaxSendfileChunk = 1 << 30;

std::atomic<bool> g_sendfile_disabled{false};
std::atomic<bool> g_splice_disabled{false};

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Failures the peer or the network causes are UNAVAILABLE (retry may work);
// the rest map as ErrnoToStatus does.
Status NetErrnoToStatus(int err, const std::string& context) {
  switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ENETUNREACH:
    case ENETDOWN:
    case ENOTCONN:
    case ETIMEDOUT:
    case EADDRNOTAVAIL:
      return UnavailableError(context + ": " + std::strerror(err));
    default:
      return ErrnoToStatus(err, context);
  }
}

std::string Str(uint64_t v) { return std::to_string(v); }

int RemainingMs(Deadline deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// Returns 1 when `events` are ready (or an error is pending), 0 once the
// deadline has passed, -errno if poll fails.
int PollUntil(int fd, short events, Deadline deadline) {
  for (;;) {
    int ms = RemainingMs(deadline);
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms);
    if (r > 0) return 1;
    if (r == 0 && ms == 0) return 0;
    if (r < 0 && errno != EINTR) return -errno;
  }
}

std::string FormatAddress(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return Endpoint{host, port}.ToString();
}

std::string FormatAddress(const sockaddr* sa, socklen_t len) {
  sockaddr_storage ss{};
  std::memcpy(&ss, sa, std::min<size_t>(len, sizeof ss));
  return FormatAddress(ss);
}

std::string LocalName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return FormatAddress(ss);
}

void SetNoDelay(int fd) {
  int one = 1;
  // Best effort: without it small frames wait for Nagle, but still arrive.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Status ResolveError(int rc, const std::string& where) {
  std::string m = "resolve " + where + ": " + ::gai_strerror(rc);
  switch (rc) {
    case EAI_AGAIN:
      return UnavailableError(std::move(m));
    case EAI_NONAME:
    case EAI_NODATA:
      return NotFoundError(std::move(m));
    case EAI_SYSTEM:
      return ErrnoToStatus(errno, "resolve " + where);
    default:
      return InvalidArgumentError(std::move(m));
  }
}

StatusOr<AddrInfoPtr> Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string service = Str(port);
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return ResolveError(rc, Endpoint{host, port}.ToString());
  return AddrInfoPtr(res);
}

// "where" or "where (address)" when the resolved address reads differently.
std::string Describe(const std::string& where, const addrinfo* a) {
  std::string address = FormatAddress(a->ai_addr, a->ai_addrlen);
  return address == where ? where : where + " (" + address + ")";
}

Status ListenError(int err, const std::string& op, const std::string& where) {
  std::string context = op + " " + where;
  if (err == EADDRINUSE || err == EADDRNOTAVAIL) {
    return FailedPreconditionError(context + ": " + std::strerror(err));
  }
  return ErrnoToStatus(err, context);
}

// A non-blocking descriptor listening on `a`.
StatusOr<int> ListenOn(const addrinfo* a, int backlog, const std::string& where) {
  const std::string what = Describe(where, a);
  UniqueFd fd(
      ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
  if (fd.get() < 0) return ListenError(errno, "socket to listen on", what);
  int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return ListenError(errno, "set SO_REUSEADDR on", what);
  }
  if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) return ListenError(errno, "bind", what);
  if (::listen(fd.get(), backlog) != 0) return ListenError(errno, "listen on", what);
  return fd.Release();
}

// A non-blocking descriptor connected to `a`.
StatusOr<int> ConnectTo(const addrinfo* a, Deadline deadline, const std::string& where) {
  const std::string what = Describe(where, a);
  UniqueFd fd(
      ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
  if (fd.get() < 0) return ErrnoToStatus(errno, "socket to connect to " + what);
  if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd.Release();
  // EINTR leaves a non-blocking connect in progress, like EINPROGRESS.
  if (errno != EINPROGRESS && errno != EINTR) return NetErrnoToStatus(errno, "connect to " + what);
  int r = PollUntil(fd.get(), POLLOUT, deadline);
  if (r == 0) {
    return DeadlineExceededError("connect to " + what + ": no answer before the deadline");
  }
  if (r < 0) return ErrnoToStatus(-r, "poll while connecting to " + what);
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) return NetErrnoToStatus(err, "connect to " + what);
  return fd.Release();
}

// The peer closed the connection `done` bytes into a `total`-byte receive.
Status ClosedEarlyError(const std::string& peer, uint64_t done, uint64_t total) {
  return UnavailableError("connection closed by " + peer + " after " + Str(done) + " of " +
                          Str(total) + " bytes");
}

Status FileEndedError(const std::string& peer, uint64_t at, uint64_t done, uint64_t len) {
  return DataLossError("sending file to " + peer + ": the file ends at offset " + Str(at) +
                       ", after " + Str(done) + " of " + Str(len) + " bytes");
}

Status PWriteAll(int file_fd, const char* p, size_t n, uint64_t offset, const std::string& peer) {
  while (n > 0) {
    ssize_t r = ::pwrite(file_fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return ErrnoToStatus(errno, "write data from " + peer + " at file offset " + Str(offset));
    }
    p += r;
    n -= r;
    offset += r;
  }
  return Status::Ok();
}

}  // namespace

namespace internal {
void DisableSendfileForTesting(bool disable) { g_sendfile_disabled = disable; }
void DisableSpliceForTesting(bool disable) { g_splice_disabled = disable; }
}  // namespace internal

Deadline DeadlineAfter(std::chrono::milliseconds timeout) { return Clock::now() + timeout; }

struct Socket::Progress {
  const char* op;  // "receiving from", "sending to", ...
  uint64_t done;
  uint64_t total;
};

Socket::~Socket() { Close(); }

Socket Socket::Adopt(int fd, std::string peer, std::unique_ptr<TlsStream> tls) {
  Socket s(fd, std::move(peer));
  s.tls_ = std::move(tls);
  return s;
}

int Socket::Release(std::unique_ptr<TlsStream>* tls) {
  const int fd = fd_;
  fd_ = -1;
  if (tls != nullptr) *tls = std::move(tls_);
  tls_.reset();
  return fd;
}

int Socket::Family() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return AF_UNSPEC;
  return ss.ss_family;
}

Socket::Socket(Socket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      peer_(std::move(other.peer_)),
      tls_(std::move(other.tls_)),
      stall_limit_(other.stall_limit_) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    peer_ = std::move(other.peer_);
    tls_ = std::move(other.tls_);
    stall_limit_ = other.stall_limit_;
  }
  return *this;
}

StatusOr<Socket> Socket::Listen(const std::string& host, uint16_t port, int backlog) {
  const std::string where = Endpoint{host, port}.ToString();
  STRATA_ASSIGN_OR_RETURN(AddrInfoPtr addrs, Resolve(host, port, /*passive=*/true));
  Status last = UnavailableError("listen on " + where + ": no address");
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    StatusOr<int> fd = ListenOn(a, backlog, where);
    if (fd.ok()) return Socket(*fd, LocalName(*fd));
    last = fd.status();
  }
  return last;
}

StatusOr<Socket> Socket::Connect(const std::string& host, uint16_t port,
                                 std::chrono::milliseconds timeout) {
  const Deadline deadline = DeadlineAfter(timeout);
  const std::string where = Endpoint{host, port}.ToString();
  STRATA_ASSIGN_OR_RETURN(AddrInfoPtr addrs, Resolve(host, port, /*passive=*/false));
  Status last = UnavailableError("connect to " + where + ": no address");
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    StatusOr<int> fd = ConnectTo(a, deadline, where);
    if (fd.ok()) {
      SetNoDelay(*fd);
      return Socket(*fd, FormatAddress(a->ai_addr, a->ai_addrlen));
    }
    last = fd.status();
    if (last.code() == StatusCode::kDeadlineExceeded) break;
  }
  return last;
}

StatusOr<Socket> Socket::Accept(std::chrono::milliseconds timeout) {
  STRATA_RETURN_IF_ERROR(CheckOpen("accept"));
  const Deadline deadline = DeadlineAfter(timeout);
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      SetNoDelay(fd);
      return Socket(fd, FormatAddress(ss));
    }
    // A connection reset before we took it is not our error: wait for the next.
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoToStatus(errno, "accept on " + peer_);
    int r = PollUntil(fd_, POLLIN, deadline);
    if (r == 0) {
      return DeadlineExceededError("accept on " + peer_ + ": no connection within " +
                                   Str(timeout.count()) + " ms");
    }
    if (r < 0) return ErrnoToStatus(-r, "poll for accept on " + peer_);
  }
}

StatusOr<uint16_t> Socket::LocalPort() const {
  STRATA_RETURN_IF_ERROR(CheckOpen("local port"));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return ErrnoToStatus(errno, "getsockname of " + peer_);
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return InternalError("getsockname of " + peer_ + ": not an IP socket");
}

Status Socket::SendAll(const void* data, size_t n, Deadline deadline) {
  STRATA_RETURN_IF_ERROR(CheckOpen("send"));
  return SendRange(static_cast<const char*>(data), n, deadline, 0, n);
}

Status Socket::RecvAll(void* data, size_t n, Deadline deadline) {
  STRATA_RETURN_IF_ERROR(CheckOpen("receive"));
  return RecvRange(static_cast<char*>(data), n, deadline, 0, n);
}

Status Socket::SendFile(int file_fd, uint64_t offset, uint64_t len, Deadline deadline) {
  STRATA_RETURN_IF_ERROR(CheckOpen("send file"));
  // TLS encrypts in user space: the file's bytes must pass through it.
  if (tls_ != nullptr) return SendFileMapped(file_fd, offset, len, deadline);
  uint64_t done = 0;
  while (done < len) {
    if (g_sendfile_disabled) return SendFileByCopy(file_fd, offset, len, done, deadline);
    off_t off = static_cast<off_t>(offset + done);
    ssize_t r = ::sendfile(fd_, file_fd, &off, std::min(len - done, kMaxSendfileChunk));
    if (r > 0) {
      done += r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    // The file system or file type cannot sendfile: copy through user space.
    if (r < 0 && (errno == EINVAL || errno == ENOSYS)) {
      return SendFileByCopy(file_fd, offset, len, done, deadline);
    }
    const Progress progress{"sending file to", done, len};
    if (r == 0) {
      return FileEndedError(peer_, offset + done, done, len);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError(errno, progress);
    STRATA_RETURN_IF_ERROR(Await(POLLOUT, deadline, progress));
  }
  return Status::Ok();
}

// TLS encrypts from a read-only mapping of the range: the file's pages are
// read once, by the cipher, instead of copied into a buffer first. The size
// is checked first (a mapping past the end would fault).
Status Socket::SendFileMapped(int file_fd, uint64_t offset, uint64_t len, Deadline deadline) {
  if (len == 0) return Status::Ok();
  struct stat st;
  if (::fstat(file_fd, &st) != 0) return ErrnoToStatus(errno, "stat the file to send to " + peer_);
  if (static_cast<uint64_t>(st.st_size) < offset + len) {  // checked before any byte is sent
    return FileEndedError(peer_, std::max<uint64_t>(offset, st.st_size), 0, len);
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const size_t span = static_cast<size_t>(offset + len - start);
  void* map = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, file_fd, static_cast<off_t>(start));
  if (map == MAP_FAILED) return SendFileByCopy(file_fd, offset, len, 0, deadline);
  ::madvise(map, span, MADV_SEQUENTIAL);
  const char* p = static_cast<const char*>(map) + (offset - start);
  Status s;
  for (uint64_t done = 0; done < len && s.ok(); done += std::min(len - done, kCopyBufferSize)) {
    s = SendRange(p + done, std::min(len - done, kCopyBufferSize), deadline, done, len);
  }
  ::munmap(map, span);
  return s;
}

Status Socket::SendFileByCopy(int file_fd, uint64_t offset, uint64_t len, uint64_t done,
                              Deadline deadline) {
  auto buf = std::make_unique_for_overwrite<char[]>(std::min(len - done, kCopyBufferSize));
  while (done < len) {
    size_t chunk = std::min(len - done, kCopyBufferSize);
    ssize_t r = ::pread(file_fd, buf.get(), chunk, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoToStatus(errno, "read the file to send to " + peer_);
    if (r == 0) {
      return FileEndedError(peer_, offset + done, done, len);
    }
    STRATA_RETURN_IF_ERROR(SendRange(buf.get(), r, deadline, done, len));
    done += r;
  }
  return Status::Ok();
}

Status Socket::RecvToFile(int file_fd, uint64_t offset, uint64_t len, Deadline deadline) {
  STRATA_RETURN_IF_ERROR(CheckOpen("receive file"));
  if (len == 0) return Status::Ok();
  uint64_t done = 0;
  if (!g_splice_disabled && tls_ == nullptr)
    STRATA_RETURN_IF_ERROR(SpliceToFile(file_fd, offset, len, &done, deadline));
  if (done == len) return Status::Ok();
  auto buf = std::make_unique_for_overwrite<char[]>(std::min(len - done, kCopyBufferSize));
  while (done < len) {
    size_t chunk = std::min(len - done, kCopyBufferSize);
    STRATA_RETURN_IF_ERROR(RecvRange(buf.get(), chunk, deadline, done, len));
    STRATA_RETURN_IF_ERROR(PWriteAll(file_fd, buf.get(), chunk, offset + done, peer_));
    done += chunk;
  }
  return Status::Ok();
}

// socket -> pipe takes the socket's pages without copying them; pipe -> file
// copies them into the page cache: one copy instead of recv's and pwrite's
// two. Stops early, with *done bytes written, where splice is not supported
// (the caller copies the rest).
Status Socket::SpliceToFile(int file_fd, uint64_t offset, uint64_t len, uint64_t* done,
                            Deadline deadline) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return Status::Ok();
  UniqueFd in(p[0]), out(p[1]);
  int cap = ::fcntl(out.get(), F_SETPIPE_SZ, static_cast<int>(kCopyBufferSize));
  if (cap <= 0) cap = ::fcntl(out.get(), F_GETPIPE_SZ);
  if (cap <= 0) return Status::Ok();
  while (*done < len) {
    const Progress progress{"receiving from", *done, len};
    size_t want = std::min<uint64_t>(len - *done, static_cast<uint64_t>(cap));
    ssize_t n = ::splice(fd_, nullptr, out.get(), nullptr, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n == 0) {
      return ClosedEarlyError(peer_, *done, len);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && *done == 0) return Status::Ok();  // no splice from this socket
      if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError(errno, progress);
      STRATA_RETURN_IF_ERROR(Await(POLLIN, deadline, progress));
      continue;
    }
    STRATA_RETURN_IF_ERROR(DrainPipe(in.get(), file_fd, offset + *done, static_cast<size_t>(n)));
    *done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// Moves exactly n bytes that are in the pipe to the file at `offset`.
Status Socket::DrainPipe(int pipe_fd, int file_fd, uint64_t offset, size_t n) {
  bool copy = false;  // the file system has no splice_write: read and pwrite
  char buf[64 << 10];
  while (n > 0) {
    ssize_t m;
    if (!copy) {
      loff_t off = static_cast<loff_t>(offset);
      m = ::splice(pipe_fd, nullptr, file_fd, &off, n, SPLICE_F_MOVE);
      if (m < 0 && errno == EINVAL) {
        copy = true;
        continue;
      }
    } else {
      m = ::read(pipe_fd, buf, std::min(n, sizeof buf));
      if (m > 0)
        STRATA_RETURN_IF_ERROR(PWriteAll(file_fd, buf, static_cast<size_t>(m), offset, peer_));
    }
    if (m < 0 && errno == EINTR) continue;
    if (m <= 0) {
      return ErrnoToStatus(m < 0 ? errno : EIO,
                           "write data received from " + peer_ + " at offset " + Str(offset));
    }
    offset += static_cast<uint64_t>(m);
    n -= static_cast<size_t>(m);
  }
  return Status::Ok();
}

void Socket::Shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::Abort() {
  if (fd_ < 0) return;
  linger off{1, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &off, sizeof off);  // best effort
  ::shutdown(fd_, SHUT_RDWR);
}

void Socket::Close() {
  if (fd_ >= 0) {
    if (tls_ != nullptr) tls_->Shutdown();
    ::close(fd_);
  }
  fd_ = -1;
  tls_.reset();
}

Status Socket::StartTls(std::shared_ptr<const TlsContext> context, TlsStream::Role role,
                        const std::string& server_name, Deadline deadline) {
  STRATA_RETURN_IF_ERROR(CheckOpen("TLS handshake"));
  if (tls_ != nullptr) return FailedPreconditionError("TLS with " + peer_ + " is already on");
  STRATA_ASSIGN_OR_RETURN(tls_, TlsStream::New(std::move(context), fd_, role, server_name, peer_));
  const Progress progress{"in the TLS handshake with", 0, 0};
  for (;;) {
    StatusOr<IoStep> step = tls_->Handshake();
    if (!step.ok()) {
      tls_.reset();
      return step.status();
    }
    if (step->kind == IoStep::kProgress) return Status::Ok();
    if (step->kind == IoStep::kClosed) {
      tls_.reset();
      return UnavailableError("TLS handshake: connection closed by " + peer_);
    }
    Status waited = AwaitStep(*step, deadline, progress);
    if (!waited.ok()) {
      tls_.reset();
      return waited;
    }
  }
}

std::string Socket::Protection() const { return tls_ != nullptr ? tls_->Describe() : "plaintext"; }

StatusOr<IoStep> TrySendPlain(int fd, const void* data, size_t n, const std::string& context) {
  for (;;) {
    const ssize_t r = ::send(fd, data, n, MSG_NOSIGNAL);
    if (r > 0) return IoStep{IoStep::kProgress, static_cast<size_t>(r)};
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK) return IoStep{IoStep::kWantWrite, 0};
    return NetErrnoToStatus(errno, context);
  }
}

StatusOr<IoStep> TryRecvPlain(int fd, void* data, size_t n, const std::string& context) {
  for (;;) {
    const ssize_t r = ::recv(fd, data, n, 0);
    if (r > 0) return IoStep{IoStep::kProgress, static_cast<size_t>(r)};
    if (r == 0) return IoStep{IoStep::kClosed, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStep{IoStep::kWantRead, 0};
    return NetErrnoToStatus(errno, context);
  }
}

StatusOr<IoStep> Socket::TrySend(const char* p, size_t n, const Progress& progress) {
  if (tls_ != nullptr) return WithProgress(tls_->Write(p, n), progress);
  return TrySendPlain(fd_, p, n, IoContext(progress));
}

StatusOr<IoStep> Socket::TryRecv(char* p, size_t n, const Progress& progress) {
  if (tls_ != nullptr) return WithProgress(tls_->Read(p, n), progress);
  return TryRecvPlain(fd_, p, n, IoContext(progress));
}

StatusOr<IoStep> Socket::WithProgress(StatusOr<IoStep> step, const Progress& progress) {
  if (step.ok()) return step;
  return Status(step.status().code(), std::string(step.status().message()) + " (after " +
                                          Str(progress.done) + " of " + Str(progress.total) +
                                          " bytes)");
}

Status Socket::AwaitStep(const IoStep& step, Deadline deadline, const Progress& progress) const {
  return Await(step.kind == IoStep::kWantWrite ? POLLOUT : POLLIN, deadline, progress);
}

Status Socket::CheckOpen(const char* op) const {
  if (fd_ >= 0) return Status::Ok();
  std::string m = std::string(op) + ": the socket is closed";
  if (!peer_.empty()) m += " (it was connected to " + peer_ + ")";
  return FailedPreconditionError(std::move(m));
}

Status Socket::Await(short events, Deadline deadline, const Progress& progress) const {
  const bool stall_first = stall_limit_.count() > 0 && Clock::now() + stall_limit_ < deadline;
  int r = PollUntil(fd_, events, stall_first ? DeadlineAfter(stall_limit_) : deadline);
  if (r > 0) return Status::Ok();
  if (r < 0) return IoError(-r, progress);
  std::string m = "timed out " + std::string(progress.op) + " " + peer_;
  if (progress.total > 0) {
    m += " after " + Str(progress.done) + " of " + Str(progress.total) + " bytes";
  }
  if (stall_first) {
    m += ": no byte moved for " + Str(static_cast<uint64_t>(stall_limit_.count())) + " ms";
  }
  return DeadlineExceededError(std::move(m));
}

std::string Socket::IoContext(const Progress& progress) const {
  return std::string(progress.op) + " " + peer_ + " after " + Str(progress.done) + " of " +
         Str(progress.total) + " bytes";
}

Status Socket::IoError(int err, const Progress& progress) const {
  return NetErrnoToStatus(err, IoContext(progress));
}

Status Socket::SendRange(const char* p, size_t n, Deadline deadline, uint64_t base,
                         uint64_t total) {
  size_t sent = 0;
  while (sent < n) {
    const Progress progress{"sending to", base + sent, total};
    STRATA_ASSIGN_OR_RETURN(IoStep step, TrySend(p + sent, n - sent, progress));
    if (step.kind == IoStep::kProgress) {
      sent += step.bytes;
    } else if (step.kind == IoStep::kClosed) {
      return UnavailableError("sending to " + peer_ + ": the connection was closed after " +
                              Str(base + sent) + " of " + Str(total) + " bytes");
    } else {
      STRATA_RETURN_IF_ERROR(AwaitStep(step, deadline, progress));
    }
  }
  // TLS may hold the last records back to send them together: send them.
  while (tls_ != nullptr && tls_->unsent() > 0) {
    const Progress progress{"sending to", base + n, total};
    STRATA_ASSIGN_OR_RETURN(IoStep step, WithProgress(tls_->Flush(), progress));
    if (step.kind != IoStep::kProgress) STRATA_RETURN_IF_ERROR(AwaitStep(step, deadline, progress));
  }
  return Status::Ok();
}

Status Socket::RecvRange(char* p, size_t n, Deadline deadline, uint64_t base, uint64_t total) {
  size_t got = 0;
  while (got < n) {
    const Progress progress{"receiving from", base + got, total};
    STRATA_ASSIGN_OR_RETURN(IoStep step, TryRecv(p + got, n - got, progress));
    if (step.kind == IoStep::kProgress) {
      got += step.bytes;
    } else if (step.kind == IoStep::kClosed) {
      return ClosedEarlyError(peer_, base + got, total);
    } else {
      STRATA_RETURN_IF_ERROR(AwaitStep(step, deadline, progress));
    }
  }
  return Status::Ok();
}

}  // namespace strata::net
