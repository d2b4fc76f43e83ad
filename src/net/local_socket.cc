// Copyright 2026 The Strata Authors.
//
// Unix-domain sockets: how the node's own callers (`strata status` on the
// node, `strata run`) reach its agent, proving who they are by their uid
// (SO_PEERCRED) rather than by the job's secret.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/socket.h"
#include "util/unique_fd.h"

namespace strata::net {
namespace {

// The address of the socket file `path`. One longer than sun_path takes is
// reached through its directory, opened here (*dir_fd, to be held by the
// caller until bound or connected) as /proc/self/fd/N/<name>: the kernel
// resolves that link to the directory itself.
StatusOr<sockaddr_un> UnixAddress(const std::string& path, UniqueFd* dir_fd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = path;
  dir_fd->Reset();
  if (path.size() >= sizeof addr.sun_path) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos)
      return InvalidArgumentError("local socket name too long: " + path);
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    const int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open the directory of the local socket " + path);
    *dir_fd = UniqueFd(fd);
    name = "/proc/self/fd/" + std::to_string(dir_fd->get()) + path.substr(slash);
  }
  if (name.empty() || name.size() >= sizeof addr.sun_path) {
    dir_fd->Reset();
    return InvalidArgumentError("the local socket path " + path +
                                " is empty, or its name too long");
  }
  std::memcpy(addr.sun_path, name.data(), name.size());
  return addr;
}

// A socket file at `path` left by an earlier process goes; anything else
// there is not ours to remove.
Status RemoveStaleSocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? Status::Ok() : ErrnoToStatus(errno, "stat " + path);
  }
  if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
    return FailedPreconditionError(path + " exists and is not a socket of this user's: remove it");
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoToStatus(errno, "unlink " + path);
  return Status::Ok();
}

}  // namespace

std::string LocalPeer::Describe() const {
  return "uid " + std::to_string(uid) + " (pid " + std::to_string(pid) + ")";
}

StatusOr<LocalPeer> LocalPeerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return ErrnoToStatus(errno, "SO_PEERCRED");
  }
  return LocalPeer{cred.pid, cred.uid, cred.gid};
}

StatusOr<Socket> Socket::ListenLocal(const std::string& path, int backlog, unsigned mode,
                                     gid_t group) {
  UniqueFd dir;
  STRATA_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path, &dir));
  STRATA_RETURN_IF_ERROR(RemoveStaleSocket(path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket to listen on " + path);
  Socket s(fd, path);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return ErrnoToStatus(errno, "bind " + path);
  }
  // By name: a socket's own descriptor does not carry the file's mode. The
  // directory is ours alone (see the header), so the name is the file.
  if (::chown(path.c_str(), static_cast<uid_t>(-1), group) != 0) {
    return ErrnoToStatus(errno, "give " + path + " to group " + std::to_string(group));
  }
  if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return ErrnoToStatus(errno, "chmod " + path);
  }
  if (::listen(fd, backlog) != 0) return ErrnoToStatus(errno, "listen on " + path);
  return s;
}

StatusOr<Socket> Socket::ConnectLocal(const std::string& path, std::chrono::milliseconds timeout) {
  UniqueFd dir;
  STRATA_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path, &dir));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket to connect to " + path);
  Socket s(fd, path);
  // A full backlog answers EAGAIN at once (a Unix-domain connect does not
  // wait in the background): try again until the deadline.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int err = 0;
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return s;
    err = errno;
    if (err != EAGAIN && err != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return UnavailableError("connect to the local socket " + path + ": the agent is busy");
    }
    ::usleep(10000);
  }
  if (err == ENOENT || err == ECONNREFUSED) {
    return UnavailableError("connect to the local socket " + path + ": " + std::strerror(err) +
                            " (is the agent running on this node?)");
  }
  if (err == EACCES) {
    return PermissionDeniedError("connect to the local socket " + path + ": " + std::strerror(err) +
                                 " (only the agent's user and the job's group may)");
  }
  return ErrnoToStatus(err, "connect to the local socket " + path);
}

}  // namespace strata::net
