// Copyright 2026 The Strata Authors.
#include "agent/rpc/step_stream.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "agent/rpc/client.h"
#include "agent/store/stream_verify.h"
#include "net/frame.h"
#include "util/crash_point.h"
#include "util/file_util.h"
#include "util/json_bounded.h"
#include "util/ram_disk.h"
#include "wire/json.h"

namespace strata::agent {
namespace {

// Generous: a 100 GB step over a slow link still fits.
constexpr auto kDataTimeout = std::chrono::minutes(30);

}  // namespace

Status SendStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index) {
  const net::Deadline deadline = DataDeadline();
  for (const auto& f : index.files) {
    std::string path = JoinPath(dir, f.path);
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoToStatus(errno, "open " + path);
    STRATA_RETURN_IF_ERROR(socket.SendFile(fd.get(), 0, f.size, deadline)
                               .WithContext("sending " + path + " to " + socket.peer()));
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
  const std::vector<wire::RangeCheck>& checks = verifier->ChecksFor(f.path);
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

Status CheckRoomToReceive(const std::string& dir, uint64_t bytes, const std::string& what) {
  return CheckFreeSpace(dir, bytes, what, bytes >> 4);
}

std::optional<double> FillOf(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0 || st.f_blocks == 0) return std::nullopt;
  return 1.0 - static_cast<double>(st.f_bavail) / static_cast<double>(st.f_blocks);
}

net::Deadline DataDeadline() {
  return net::DeadlineAfter(std::chrono::duration_cast<std::chrono::milliseconds>(kDataTimeout));
}

Status AwaitCommitted(net::Socket& socket, const std::string& peer) {
  STRATA_ASSIGN_OR_RETURN(net::Frame ack, net::RecvFrame(socket, kMaxControlBytes, DataDeadline()));
  return wire::StatusFromJson(ParseBounded(ack.payload), peer);
}

StatusOr<UniqueFd> CreateReceiveFile(Store* store, const std::string& path, uint64_t size) {
  Env* const env = store != nullptr ? store->env() : Env::Default();
  STRATA_RETURN_IF_ERROR(CreateDirs(env, Dirname(path)));
  // A spare file's pages are already there: overwriting them is faster
  // than allocating new ones. It was renamed to `path` without replacing
  // anything, so it is ours.
  const bool spare = store != nullptr && size > 0 && store->TakeSpare(size, path);
  UniqueFd fd(
      spare ? ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
            : ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return ErrnoToStatus(errno, "create " + path);
  // The final size first: it frees a larger spare's tail, and a tmpfs
  // mounted with huge=within_size backs a file with huge pages only where
  // its size already reaches.
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return ErrnoToStatus(errno, "truncate " + path);
  }
  return fd;
}

Status RecvStepFiles(net::Socket& socket, const std::string& dir, const StepIndex& index,
                     Store* store, StreamVerifier* verifier) {
  const net::StallLimitScope stall(socket, kDataStallLimit);
  const net::Deadline deadline = DataDeadline();
  for (const auto& f : index.files) {
    STRATA_RETURN_IF_ERROR(ValidateRelativePath(f.path));  // never write outside `dir`
    std::string path = JoinPath(dir, f.path);
    STRATA_ASSIGN_OR_RETURN(const UniqueFd fd, CreateReceiveFile(store, path, f.size));
    Status s = RecvFile(socket, fd.get(), f, verifier, deadline);
    if (s.ok() && ::fdatasync(fd.get()) != 0) s = ErrnoToStatus(errno, "fsync " + path);
    STRATA_RETURN_IF_ERROR(s.WithContext("receiving " + path + " from " + socket.peer()));
    CrashPoint("transfer.mid_receive");  // a file in, more may follow
  }
  return Status::Ok();
}

Status CreateStepFiles(const std::string& dir, const StepIndex& index, Store* store) {
  for (const auto& f : index.files) {
    STRATA_RETURN_IF_ERROR(ValidateRelativePath(f.path));  // never write outside `dir`
    STRATA_RETURN_IF_ERROR(CreateReceiveFile(store, JoinPath(dir, f.path), f.size).status());
  }
  return Status::Ok();
}

namespace {

// Calls `io` on each of `ranges` (checked against `index`), a run of ranges
// of one file through one descriptor opened with `flags`. A receiver
// (O_WRONLY) fdatasyncs each file after its run. The error says
// "<verb> <path> <peer_phrase>" ("receiving a.bin from 10.0.0.2:7000").
Status EachRange(const std::string& dir, const StepIndex& index,
                 const std::vector<wire::FileRange>& ranges, int flags,
                 const std::function<Status(int fd, const wire::FileRange& r)>& io,
                 const std::string& verb, const std::string& peer_phrase) {
  STRATA_RETURN_IF_ERROR(wire::CheckRanges(index, ranges));
  const bool receiving = (flags & O_ACCMODE) == O_WRONLY;
  for (size_t i = 0; i < ranges.size();) {
    STRATA_RETURN_IF_ERROR(ValidateRelativePath(index.files[ranges[i].file].path));
    const std::string path = JoinPath(dir, index.files[ranges[i].file].path);
    const UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) return ErrnoToStatus(errno, "open " + path);
    Status s;
    for (const size_t file = ranges[i].file; s.ok() && i < ranges.size() && ranges[i].file == file;
         ++i) {
      s = io(fd.get(), ranges[i]);
    }
    if (s.ok() && receiving && ::fdatasync(fd.get()) != 0) {
      s = ErrnoToStatus(errno, "fsync " + path);
    }
    STRATA_RETURN_IF_ERROR(s.WithContext(verb + " " + path + " " + peer_phrase));
    if (receiving) CrashPoint("transfer.mid_receive");  // a file's ranges in, more may follow
  }
  return Status::Ok();
}

}  // namespace

Status SendRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<wire::FileRange>& ranges) {
  const net::Deadline deadline = DataDeadline();
  return EachRange(
      dir, index, ranges, O_RDONLY,
      [&](int fd, const wire::FileRange& r) {
        return socket.SendFile(fd, r.offset, r.length, deadline);
      },
      "sending", "to " + socket.peer());
}

Status RecvRanges(net::Socket& socket, const std::string& dir, const StepIndex& index,
                  const std::vector<wire::FileRange>& ranges) {
  const net::StallLimitScope stall(socket, kDataStallLimit);
  const net::Deadline deadline = DataDeadline();
  return EachRange(
      dir, index, ranges, O_WRONLY,
      [&](int fd, const wire::FileRange& r) {
        return socket.RecvToFile(fd, r.offset, r.length, deadline);
      },
      "receiving", "from " + socket.peer());
}

}  // namespace strata::agent
