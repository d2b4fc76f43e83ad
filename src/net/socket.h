// Copyright 2026 The Strata Authors.
//
// TCP sockets for agent-to-agent traffic, and Unix-domain sockets for the
// node's own callers (Linux only). Every call blocks the
// caller until it is done or its deadline passes; internally the descriptor
// is non-blocking and waits use poll(), so a silent or slow peer can never
// hold a thread past the deadline it was given. No call raises SIGPIPE.
//
// Errors name the peer ("127.0.0.1:34567") and the operation. Codes:
//   UNAVAILABLE        refused, reset or closed by the peer: retry may succeed.
//   DEADLINE_EXCEEDED  the deadline passed; the message says how far it got.
//   FAILED_PRECONDITION the socket is closed, or the listen address is in use.
// After any error from a send or receive the byte stream is out of sync:
// close the socket.
//
// A socket may carry TLS (net/tls.h): after StartTls every send and receive
// is encrypted, SendFile encrypts from a read-only mapping of the file (no
// sendfile: the bytes are encrypted in user space) and RecvToFile decrypts
// into a buffer before it writes (no splice). Deadlines hold through the handshake and every
// record.
//
// Thread-safety: a Socket is used by one thread at a time, except Shutdown()
// and Abort(), which another thread may call to wake a blocked call (while
// the owner neither moves nor closes the socket).
#ifndef STRATA_NET_SOCKET_H_
#define STRATA_NET_SOCKET_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "net/tls.h"
#include "strata/status.h"

namespace strata::net {

using Deadline = std::chrono::steady_clock::time_point;

// now + timeout.
Deadline DeadlineAfter(std::chrono::milliseconds timeout);

// One non-blocking send or receive on a plain TCP descriptor, in IoStep's
// terms: what Socket does without TLS, and what an event loop serving both
// kinds of connection does (agent/rpc/server.cc). A failure is UNAVAILABLE
// when the peer or the network caused it, else as ErrnoToStatus, with
// `context` ("receiving from 10.0.0.2:7070 after 10 of 20 bytes") in front.
StatusOr<IoStep> TryRecvPlain(int fd, void* data, size_t n, const std::string& context);
StatusOr<IoStep> TrySendPlain(int fd, const void* data, size_t n, const std::string& context);

// Who is at the other end of a Unix-domain connection, as the kernel
// recorded it when the peer connected (SO_PEERCRED): not a claim the peer
// makes, and no secret is involved.
struct LocalPeer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string Describe() const;  // "uid 1000 (pid 4242)"
};
// The credentials of the peer of the Unix-domain socket `fd`.
StatusOr<LocalPeer> LocalPeerOf(int fd);

class Socket {
 public:
  Socket() = default;  // not open
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Binds and listens on host:port with SO_REUSEADDR. Port 0 picks an
  // ephemeral port (see LocalPort()). An empty host means every interface.
  static StatusOr<Socket> Listen(const std::string& host, uint16_t port, int backlog);

  // Resolves host (IPv4 or IPv6; getaddrinfo) and connects to the first
  // address that answers within `timeout` overall. Refused or unreachable is
  // UNAVAILABLE and names host:port. The result has TCP_NODELAY set.
  static StatusOr<Socket> Connect(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds timeout);

  // REQUIRES: a listening socket. Waits up to `timeout` for a connection;
  // DEADLINE_EXCEEDED when none came, so an accept loop can check a stop flag.
  // The result has TCP_NODELAY set.
  StatusOr<Socket> Accept(std::chrono::milliseconds timeout);

  // A Unix-domain stream socket listening at `path`, the node's local
  // callers' way in (their uid is the credential, LocalPeer). A stale socket
  // file at `path` is replaced; anything else there is refused.
  // REQUIRES: `path`'s directory is this process's own and no one else's to
  // write (the agent's directory), so the name cannot be swapped meanwhile.
  // The socket file is made mode `mode` with group `group` (connecting
  // needs write permission on it).
  static StatusOr<Socket> ListenLocal(const std::string& path, int backlog, unsigned mode,
                                      gid_t group);
  // Connects to the Unix-domain socket at `path` (a local agent).
  static StatusOr<Socket> ConnectLocal(const std::string& path, std::chrono::milliseconds timeout);

  // Takes ownership of `fd`, an open socket (e.g. one an event loop
  // accepted) that must be non-blocking, and of its TLS state if it has
  // one; `peer` names it in messages.
  static Socket Adopt(int fd, std::string peer, std::unique_ptr<TlsStream> tls = nullptr);
  // Gives up ownership of the descriptor (-1 if not open) and returns it;
  // the TLS state, if any, goes with it through *tls (which must then be
  // non-null).
  int Release(std::unique_ptr<TlsStream>* tls = nullptr);
  // AF_INET, AF_INET6 or AF_UNIX (of the bound address); AF_UNSPEC if unknown.
  int Family() const;
  // Whether this is a Unix-domain connection: a caller on this node, whose
  // credentials the kernel vouches for (LocalPeer).
  bool local() const { return Family() == AF_UNIX; }

  // The bound local port (of a listening or connected socket).
  StatusOr<uint16_t> LocalPort() const;

  // Sends or receives exactly n bytes. If the peer closes first, RecvAll
  // returns UNAVAILABLE "connection closed by <peer> after N of M bytes".
  Status SendAll(const void* data, size_t n, Deadline deadline);
  Status RecvAll(void* data, size_t n, Deadline deadline);

  // Sends bytes [offset, offset+len) of the open file `file_fd` with
  // sendfile(2) (no copy through user space; best from tmpfs or the page
  // cache), falling back to pread+send where sendfile is unsupported.
  // A file shorter than offset+len is DATA_LOSS. Does not move file_fd's offset.
  Status SendFile(int file_fd, uint64_t offset, uint64_t len, Deadline deadline);

  // Receives exactly len bytes and writes them at [offset, offset+len) of the
  // open, writable file `file_fd` (splice through a pipe where the file
  // system supports it, else recv + pwrite; the file's offset is unchanged).
  // On error the range holds an unspecified prefix of the data.
  Status RecvToFile(int file_fd, uint64_t offset, uint64_t len, Deadline deadline);

  // A limit on every wait inside a send or receive: a peer that moves no
  // byte for `limit` fails the call with DEADLINE_EXCEEDED ("... no byte
  // moved for N ms") however far off the call's deadline is. A transfer
  // given a long deadline for its size thereby still ends soon after its
  // peer goes silent (a host gone without a reset). Zero, the default,
  // leaves only the deadline.
  void set_stall_limit(std::chrono::milliseconds limit) { stall_limit_ = limit; }
  std::chrono::milliseconds stall_limit() const { return stall_limit_; }

  // REQUIRES: a freshly connected (kClient) or accepted (kServer) socket.
  // Runs the TLS handshake within `deadline`; from then on every byte is
  // encrypted. `server_name` is the host a client dialled (its certificate
  // is checked against it in certificate mode).
  Status StartTls(std::shared_ptr<const TlsContext> context, TlsStream::Role role,
                  const std::string& server_name, Deadline deadline);
  bool encrypted() const { return tls_ != nullptr; }
  // "TLSv1.3 TLS_AES_128_GCM_SHA256", or "plaintext".
  std::string Protection() const;

  // shutdown(SHUT_RDWR): the peer sees end of stream and a call blocked in
  // another thread returns. The descriptor stays open until Close().
  void Shutdown();
  // Shutdown() for a transfer given up: Close() then resets the connection
  // (SO_LINGER 0) instead of ending it with a FIN, so a peer still sending
  // fails at once rather than waiting on a closed window until its deadline.
  void Abort();
  void Close();

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // The remote address of a connected socket ("127.0.0.1:34567",
  // "[::1]:34567"); the local address of a listening one.
  const std::string& peer() const { return peer_; }

 private:
  struct Progress;  // what a wait reports when the deadline passes

  Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

  // One attempt to move bytes, through TLS when on.
  StatusOr<IoStep> TrySend(const char* p, size_t n, const Progress& progress);
  StatusOr<IoStep> TryRecv(char* p, size_t n, const Progress& progress);
  static StatusOr<IoStep> WithProgress(StatusOr<IoStep> step, const Progress& progress);
  // Waits for what `step` wants (kWantRead or kWantWrite).
  Status AwaitStep(const IoStep& step, Deadline deadline, const Progress& progress) const;

  Status CheckOpen(const char* op) const;
  // Waits until `events` are ready; DEADLINE_EXCEEDED describes `progress`.
  Status Await(short events, Deadline deadline, const Progress& progress) const;
  // "receiving from <peer> after <done> of <total> bytes".
  std::string IoContext(const Progress& progress) const;
  Status IoError(int err, const Progress& progress) const;
  // Send or receive [p, p+n), which is bytes [base, base+n) of a transfer of
  // `total` bytes (for messages).
  Status SendRange(const char* p, size_t n, Deadline deadline, uint64_t base, uint64_t total);
  Status RecvRange(char* p, size_t n, Deadline deadline, uint64_t base, uint64_t total);
  Status SpliceToFile(int file_fd, uint64_t offset, uint64_t len, uint64_t* done,
                      Deadline deadline);
  Status DrainPipe(int pipe_fd, int file_fd, uint64_t offset, size_t n);
  Status SendFileMapped(int file_fd, uint64_t offset, uint64_t len, Deadline deadline);
  Status SendFileByCopy(int file_fd, uint64_t offset, uint64_t len, uint64_t done,
                        Deadline deadline);

  int fd_ = -1;
  std::string peer_;
  std::unique_ptr<TlsStream> tls_;  // null: plaintext
  std::chrono::milliseconds stall_limit_{0};
};

// Sets a socket's stall limit for the scope's life, then puts the one
// before it back (a kept connection goes on to calls of its own).
class StallLimitScope {
 public:
  StallLimitScope(Socket& socket, std::chrono::milliseconds limit)
      : socket_(socket), before_(socket.stall_limit()) {
    socket.set_stall_limit(limit);
  }
  ~StallLimitScope() { socket_.set_stall_limit(before_); }
  StallLimitScope(const StallLimitScope&) = delete;
  StallLimitScope& operator=(const StallLimitScope&) = delete;

 private:
  Socket& socket_;
  const std::chrono::milliseconds before_;
};

namespace internal {
// Makes SendFile take its pread+send fallback path, for tests.
void DisableSendfileForTesting(bool disable);
// Makes RecvToFile take its recv+pwrite path instead of splice, for tests.
void DisableSpliceForTesting(bool disable);
}  // namespace internal

}  // namespace strata::net

#endif  // STRATA_NET_SOCKET_H_
