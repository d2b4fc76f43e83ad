// Copyright 2026 The Strata Authors.
#include "agent/rpc.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <functional>

#include "agent/store.h"
#include "net/auth.h"
#include "net/frame.h"
#include "util/crash_point.h"
#include "util/file_util.h"

namespace strata::agent {
namespace {

// Generous: a 100 GB step over a slow link still fits.
constexpr auto kDataTimeout = std::chrono::minutes(30);
constexpr auto kReplyTimeout = std::chrono::seconds(30);

}  // namespace

StatusOr<RpcClient> RpcClient::Connect(const Endpoint& to, const std::string& secret,
                                       const std::string& client_id,
                                       std::chrono::milliseconds timeout) {
  RpcClient c;
  c.peer_ = to.ToString();
  STRATA_ASSIGN_OR_RETURN(c.socket_, net::Socket::Connect(to.host, to.port, timeout));
  STRATA_RETURN_IF_ERROR(
      net::AuthenticateAsClient(c.socket_, secret, client_id, net::DeadlineAfter(timeout)));
  return c;
}

StatusOr<json> RpcClient::Call(const json& request, std::chrono::milliseconds timeout) {
  answered_ = false;
  auto deadline = net::DeadlineAfter(timeout);
  STRATA_RETURN_IF_ERROR(net::SendFrame(socket_, kFrameCall, request.dump(), deadline));
  STRATA_ASSIGN_OR_RETURN(net::Frame f, net::RecvFrame(socket_, kMaxControlBytes, deadline));
  if (f.type != kFrameReply) return InvalidArgumentError(peer_ + " sent an unexpected frame");
  json reply = ParseBounded(f.payload);
  if (!reply.is_object()) return InvalidArgumentError(peer_ + " sent a reply that is not JSON");
  answered_ = true;
  STRATA_RETURN_IF_ERROR(StatusFromJson(reply, peer_));
  return reply;
}

RpcPool::RpcPool(std::string secret, size_t max_idle)
    : secret_(std::move(secret)), max_idle_(max_idle) {}

std::optional<RpcClient> RpcPool::TakeIdle(const std::string& to) {
  MutexLock l(&mu_);
  auto it = idle_.find(to);
  if (it == idle_.end() || it->second.empty()) return std::nullopt;
  RpcClient c = std::move(it->second.back());
  it->second.pop_back();
  return c;
}

void RpcPool::GiveBack(const std::string& to, RpcClient client) {
  MutexLock l(&mu_);
  auto& idle = idle_[to];
  if (idle.size() < max_idle_) idle.push_back(std::move(client));
}

StatusOr<json> RpcPool::Call(const Endpoint& to, const std::string& client_id, const json& request,
                             std::chrono::milliseconds timeout) {
  const std::string key = to.ToString() + " " + client_id;
  if (std::optional<RpcClient> reused = TakeIdle(key)) {
    StatusOr<json> r = reused->Call(request, timeout);
    if (reused->answered()) {
      GiveBack(key, std::move(*reused));
      return r;
    }
    // The server may have closed it meanwhile (idle timeout, restart): a
    // call is safe to make again, on a new connection.
  }
  STRATA_ASSIGN_OR_RETURN(RpcClient fresh, RpcClient::Connect(to, secret_, client_id));
  StatusOr<json> r = fresh.Call(request, timeout);
  if (fresh.answered()) GiveBack(key, std::move(fresh));
  return r;
}

void RpcPool::Clear() {
  MutexLock l(&mu_);
  idle_.clear();
}

json ParseBounded(std::string_view text) {
  json::parser_callback_t shallow = [](int depth, json::parse_event_t, json&) {
    return depth <= 32;
  };
  return json::parse(text, shallow, /*allow_exceptions=*/false);
}

json StatusToJson(const Status& s) {
  if (s.ok()) return {{"ok", true}};
  return {{"ok", false}, {"code", static_cast<int>(s.code())}, {"error", s.message()}};
}

Status StatusFromJson(const json& reply, const std::string& peer) {
  auto ok = reply.find("ok");
  if (ok != reply.end() && ok->is_boolean() && ok->get<bool>()) return Status::Ok();
  // A code that is no known status code (or no integer) is INTERNAL; an
  // error that is no string is "malformed reply".
  int code = static_cast<int>(StatusCode::kInternal);
  auto c = reply.find("code");
  if (c != reply.end() && c->is_number_integer() && c->get<int64_t>() > 0 &&
      c->get<int64_t>() <= static_cast<int>(StatusCode::kInternal)) {
    code = static_cast<int>(c->get<int64_t>());
  }
  auto e = reply.find("error");
  std::string msg = e != reply.end() && e->is_string() ? e->get<std::string>() : "malformed reply";
  return Status(static_cast<StatusCode>(code), peer + ": " + msg);
}

json StepKeyToJson(const StepKey& key) {
  return {{"job", key.job}, {"rank", key.rank}, {"step", key.step}};
}

StatusOr<StepKey> StepKeyFromJson(const json& j) {
  if (!j.is_object() || !j.contains("job") || !j["job"].is_string() || !j.contains("rank") ||
      !j["rank"].is_number_integer() || !j.contains("step") || !j["step"].is_number_integer()) {
    return InvalidArgumentError("malformed step key");
  }
  // Range-checked as int64 before it becomes an int: 2^40 must not truncate to 0.
  const int64_t rank = j["rank"].get<int64_t>();
  if (rank < 0 || rank >= kMaxNodes) {
    return InvalidArgumentError("step key: rank " + std::to_string(rank) + " is out of range");
  }
  StepKey key{j["job"].get<std::string>(), j["rank"].get<int>(), j["step"].get<int64_t>()};
  STRATA_RETURN_IF_ERROR(ValidateStepKey(key));
  return key;
}

Status SendStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index) {
  const net::Deadline deadline = DataDeadline();
  for (const auto& f : index.files) {
    std::string path = JoinPath(dir, f.path);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open " + path);
    Status s = socket.SendFile(fd, 0, f.size, deadline);
    ::close(fd);
    STRATA_RETURN_IF_ERROR(s.WithContext("sending " + path + " to " + socket.peer()));
  }
  return Status::Ok();
}

namespace {

// With a verifier, a file is received in segments of at least this size,
// each ending where a check ends.
constexpr uint64_t kMinVerifySegment = 4ull << 20;

// Receives the f.size bytes of `f` into `fd`. With a verifier, hands each
// check of the file over as soon as its last byte is in.
Status RecvFile(net::Socket& socket, int fd, const IndexedFile& f, StreamVerifier* verifier,
                net::Deadline deadline) {
  if (verifier == nullptr) return socket.RecvToFile(fd, 0, f.size, deadline);
  const std::vector<RangeCheck>& checks = verifier->ChecksFor(f.path);
  size_t next = 0;  // the first check not submitted yet
  auto submit_received = [&](uint64_t at) {
    size_t first = next;
    while (next < checks.size() && checks[next].end() <= at) ++next;
    if (next > first) verifier->Submit(f.path, first, next);
  };
  for (uint64_t at = 0; at < f.size;) {
    uint64_t to = f.size;
    if (next < checks.size()) {
      to = std::min(f.size, std::max(checks[next].end(), at + kMinVerifySegment));
    }
    STRATA_RETURN_IF_ERROR(socket.RecvToFile(fd, at, to - at, deadline));
    at = to;
    submit_received(at);
  }
  // Checks of empty ranges; a check past the end stays unsubmitted, and
  // StreamVerifier::Finish reports it.
  submit_received(f.size);
  return Status::Ok();
}

}  // namespace

Status CheckFreeSpace(const std::string& dir, uint64_t bytes, const std::string& what) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "statvfs " + dir);
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (bytes + (bytes >> 4) > free_bytes) {  // keep a 1/16 margin
    return ResourceExhaustedError("no room for " + what + " in " + dir + ": " +
                                  std::to_string(bytes) + " bytes needed, " +
                                  std::to_string(free_bytes) + " free");
  }
  return Status::Ok();
}

net::Deadline DataDeadline() {
  return net::DeadlineAfter(std::chrono::duration_cast<std::chrono::milliseconds>(kDataTimeout));
}

Status SendReply(net::Socket& socket, const json& reply) {
  return net::SendFrame(socket, kFrameReply, reply.dump(), net::DeadlineAfter(kReplyTimeout));
}

Status AwaitCommitted(net::Socket& socket, const std::string& peer) {
  STRATA_ASSIGN_OR_RETURN(net::Frame ack, net::RecvFrame(socket, kMaxControlBytes, DataDeadline()));
  return StatusFromJson(ParseBounded(ack.payload), peer);
}

StatusOr<int> CreateReceiveFile(Store* store, const std::string& path, uint64_t size) {
  Env* const env = store != nullptr ? store->env() : Env::Default();
  STRATA_RETURN_IF_ERROR(CreateDirs(env, Dirname(path)));
  // A spare file's pages are already there: overwriting them is faster
  // than allocating new ones. It was renamed to `path` without replacing
  // anything, so it is ours.
  const bool spare = store != nullptr && size > 0 && store->TakeSpare(size, path);
  int fd = spare ? ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
                 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + path);
  // The final size first: it frees a larger spare's tail, and a tmpfs
  // mounted with huge=within_size backs a file with huge pages only where
  // its size already reaches.
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    Status s = ErrnoToStatus(errno, "truncate " + path);
    ::close(fd);
    return s;
  }
  return fd;
}

Status RecvStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index,
                     Store* store, StreamVerifier* verifier) {
  const net::Deadline deadline = DataDeadline();
  for (const auto& f : index.files) {
    STRATA_RETURN_IF_ERROR(ValidateRelativePath(f.path));  // never write outside `dir`
    std::string path = JoinPath(dir, f.path);
    STRATA_ASSIGN_OR_RETURN(int fd, CreateReceiveFile(store, path, f.size));
    Status s = RecvFile(socket, fd, f, verifier, deadline);
    if (s.ok() && ::fdatasync(fd) != 0) s = ErrnoToStatus(errno, "fsync " + path);
    ::close(fd);
    STRATA_RETURN_IF_ERROR(s.WithContext("receiving " + path + " from " + socket.peer()));
    CrashPoint("transfer.mid_receive");  // a file in, more may follow
  }
  return Status::Ok();
}

Status CreateStepFiles(const std::string& dir, const StepIndex& index, Store* store) {
  for (const auto& f : index.files) {
    STRATA_RETURN_IF_ERROR(ValidateRelativePath(f.path));  // never write outside `dir`
    STRATA_ASSIGN_OR_RETURN(int fd, CreateReceiveFile(store, JoinPath(dir, f.path), f.size));
    ::close(fd);
  }
  return Status::Ok();
}

Status CheckRanges(const StepIndex& index, const std::vector<FileRange>& ranges) {
  for (const FileRange& r : ranges) {
    if (r.file >= index.files.size() || r.length > index.files[r.file].size ||
        r.offset > index.files[r.file].size - r.length) {
      return InvalidArgumentError("a byte range [" + std::to_string(r.offset) + ", +" +
                                  std::to_string(r.length) + ") of file " + std::to_string(r.file) +
                                  " is not in the step");
    }
  }
  return Status::Ok();
}

namespace {

// Calls `io` on each of `ranges` (checked against `index`), a run of ranges
// of one file through one descriptor opened with `flags`. A receiver
// (O_WRONLY) fdatasyncs each file after its run. The error says
// "<verb> <path> <peer_phrase>" ("receiving a.bin from 10.0.0.2:7000").
Status EachRange(const std::string& dir, const StepIndex& index,
                 const std::vector<FileRange>& ranges, int flags,
                 const std::function<Status(int fd, const FileRange& r)>& io,
                 const std::string& verb, const std::string& peer_phrase) {
  STRATA_RETURN_IF_ERROR(CheckRanges(index, ranges));
  const bool receiving = (flags & O_ACCMODE) == O_WRONLY;
  for (size_t i = 0; i < ranges.size();) {
    STRATA_RETURN_IF_ERROR(ValidateRelativePath(index.files[ranges[i].file].path));
    const std::string path = JoinPath(dir, index.files[ranges[i].file].path);
    int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return ErrnoToStatus(errno, "open " + path);
    Status s;
    for (const size_t file = ranges[i].file; s.ok() && i < ranges.size() && ranges[i].file == file;
         ++i) {
      s = io(fd, ranges[i]);
    }
    if (s.ok() && receiving && ::fdatasync(fd) != 0) s = ErrnoToStatus(errno, "fsync " + path);
    ::close(fd);
    STRATA_RETURN_IF_ERROR(s.WithContext(verb + " " + path + " " + peer_phrase));
    if (receiving) CrashPoint("transfer.mid_receive");  // a file's ranges in, more may follow
  }
  return Status::Ok();
}

}  // namespace

Status SendRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<FileRange>& ranges) {
  const net::Deadline deadline = DataDeadline();
  return EachRange(
      dir, index, ranges, O_RDONLY,
      [&](int fd, const FileRange& r) { return socket.SendFile(fd, r.offset, r.length, deadline); },
      "sending", "to " + socket.peer());
}

Status RecvRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<FileRange>& ranges) {
  const net::Deadline deadline = DataDeadline();
  return EachRange(
      dir, index, ranges, O_WRONLY,
      [&](int fd, const FileRange& r) {
        return socket.RecvToFile(fd, r.offset, r.length, deadline);
      },
      "receiving", "from " + socket.peer());
}

}  // namespace strata::agent
