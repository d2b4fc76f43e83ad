// Copyright 2026 The Strata Authors.
#include "agent/store/dedup.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <span>
#include <utility>

#include "agent/store/stream_verify.h"
#include "format/manifest.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/mutex.h"
#include "util/scratch.h"
#include "util/thread_pool.h"
#include "util/unique_fd.h"

namespace strata::agent {
namespace {

// Bytes copied per read while a range is hashed.
constexpr size_t kCopyBlock = 4 << 20;

// Where a range with a given hash and length lives in a held step.
struct HeldRange {
  wire::StepKey key;
  std::string path;  // the held file
  uint64_t offset = 0;
};

using RangeId = std::pair<uint64_t, uint64_t>;  // XXH3-64, length

// Every checksummed range of the job's held steps, by hash and length.
std::map<RangeId, std::vector<HeldRange>> IndexHeld(const Store& store, const std::string& job) {
  std::map<RangeId, std::vector<HeldRange>> held;
  for (const auto& [key, index] : store.List()) {
    if (key.job != job) continue;
    StatusOr<wire::RangePlan> plan = HeldRanges(store, key, index);
    if (!plan.ok()) {
      Log()->warn("dedup: the ranges of held {} are unknown: {}", key.ToString(),
                  plan.status().message());
      continue;
    }
    const std::string dir = store.StepPath(key);
    for (size_t f = 0; f < plan->files.size(); ++f) {
      const std::string path = JoinPath(dir, index.files[f].path);
      for (const wire::RangeCheck& c : plan->files[f]) {
        held[{c.xxh3, c.length}].push_back({key, path, c.offset});
      }
    }
  }
  return held;
}

// Copies `length` bytes at `from_offset` of `from` to `to_offset` of the
// open `to`, hashing them. Returns their XXH3-64; a failure to write sets
// *write_failed (the incoming copy's error), one to read does not (the held
// copy's).
StatusOr<uint64_t> CopyHashed(const std::string& from, uint64_t from_offset, int to,
                              uint64_t to_offset, uint64_t length, std::span<char> buf,
                              bool* write_failed) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!in.valid()) return ErrnoToStatus(errno, "open " + from);
  Xxh3Stream hash;
  for (uint64_t done = 0; done < length;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), length - done));
    ssize_t got = ::pread(in.get(), buf.data(), n, static_cast<off_t>(from_offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoToStatus(errno, "read " + from);
    if (got == 0) return DataLossError(from + " is shorter than its index says");
    hash.Update(buf.data(), static_cast<size_t>(got));
    for (ssize_t put = 0; put < got;) {
      ssize_t w = ::pwrite(to, buf.data() + put, static_cast<size_t>(got - put),
                           static_cast<off_t>(to_offset + done + static_cast<uint64_t>(put)));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        *write_failed = true;
        return ErrnoToStatus(errno, "write");
      }
      put += w;
    }
    done += static_cast<uint64_t>(got);
  }
  return hash.Digest();
}

}  // namespace

StatusOr<wire::RangePlan> HeldRanges(const Store& store, const wire::StepKey& key,
                                     const StepIndex& index) {
  if (!index.strata) return PlanRangeChecks(index, nullptr);
  const std::string path = JoinPath(store.StepPath(key), std::string(kManifestFileName));
  STRATA_ASSIGN_OR_RETURN(std::string bytes,
                          ReadFileToString(store.env(), path, kMaxManifestBytes));
  STRATA_ASSIGN_OR_RETURN(StepInfo manifest, DecodeManifest(bytes, path));
  return PlanRangeChecks(index, &manifest);
}

StatusOr<Taken> TakeHeldRanges(const Store& store, const std::string& job, const StepIndex& index,
                               const wire::RangePlan& offered, const std::string& dir,
                               int threads) {
  const auto held = IndexHeld(store, job);
  struct Task {
    wire::FileRange to;
    uint64_t xxh3;
    const std::vector<HeldRange>* from;
  };
  std::vector<Task> tasks;
  for (size_t f = 0; f < offered.files.size() && f < index.files.size(); ++f) {
    for (const wire::RangeCheck& c : offered.files[f]) {
      auto h = held.find({c.xxh3, c.length});
      if (h != held.end() && c.length > 0)
        tasks.push_back({{f, c.offset, c.length}, c.xxh3, &h->second});
    }
  }
  Taken taken;
  Mutex mu;
  std::vector<int> fds(index.files.size(), -1);
  std::vector<UniqueFd> open;
  for (const Task& t : tasks) {
    if (fds[t.to.file] >= 0) continue;
    const std::string path = JoinPath(dir, index.files[t.to.file].path);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) return ErrnoToStatus(errno, "open " + path);
    fds[t.to.file] = fd.get();
    open.push_back(std::move(fd));
  }
  const size_t workers = std::max<size_t>(1, std::min<size_t>(tasks.size(), threads));
  // A buffer per worker, for the largest range: every receive by content
  // pays for these, also one that takes nothing.
  uint64_t largest = 0;
  for (const Task& t : tasks) largest = std::max(largest, t.to.length);
  std::vector<Scratch<>> bufs;
  for (size_t w = 0; w < workers; ++w) bufs.emplace_back(largest, kCopyBlock);
  std::atomic<size_t> next{0};
  Status s = RunParallel(workers, workers, [&](size_t w, const std::atomic<bool>&) -> Status {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      const Task& t = tasks[i];
      // The first held range whose bytes hash as offered; a held copy that
      // no longer matches its index is passed over (its own checks will
      // drop it).
      for (const HeldRange& from : *t.from) {
        bool write_failed = false;
        StatusOr<uint64_t> got =
            CopyHashed(from.path, from.offset, fds[t.to.file], t.to.offset, t.to.length,
                       {bufs[w].get(), bufs[w].size()}, &write_failed);
        if (write_failed) {
          return got.status().WithContext(JoinPath(dir, index.files[t.to.file].path));
        }
        if (got.ok() && *got == t.xxh3) {
          MutexLock l(&mu);
          taken.ranges.push_back(t.to);
          taken.bytes += t.to.length;
          taken.from.insert(from.key);
          break;
        }
        Log()->warn("dedup: {} bytes [{}, {}) of held {} do not hash as its index says{}",
                    from.path, from.offset, from.offset + t.to.length, from.key.ToString(),
                    got.ok() ? "" : ": " + got.status().message());
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  for (int fd : fds) {
    if (fd >= 0 && ::fdatasync(fd) != 0) return ErrnoToStatus(errno, "fsync in " + dir);
  }
  return taken;
}

std::vector<wire::FileRange> MissingRanges(const StepIndex& index,
                                           std::vector<wire::FileRange> taken) {
  std::sort(taken.begin(), taken.end());
  std::vector<wire::FileRange> missing;
  auto add = [&](size_t file, uint64_t from, uint64_t to) {
    if (to <= from) return;
    if (!missing.empty() && missing.back().file == file && missing.back().end() == from) {
      missing.back().length += to - from;
    } else {
      missing.push_back({file, from, to - from});
    }
  };
  size_t t = 0;
  for (size_t f = 0; f < index.files.size(); ++f) {
    uint64_t at = 0;
    for (; t < taken.size() && taken[t].file == f; ++t) {
      add(f, at, taken[t].offset);
      at = std::max(at, taken[t].end());
    }
    add(f, at, index.files[f].size);
  }
  return missing;
}

std::vector<std::vector<wire::FileRange>> PartitionRanges(
    const std::vector<wire::FileRange>& ranges, int streams, uint64_t piece) {
  std::vector<wire::FileRange> pieces;
  for (const wire::FileRange& r : ranges) {
    for (uint64_t at = 0; at < r.length; at += piece) {
      pieces.push_back({r.file, r.offset + at, std::min(piece, r.length - at)});
    }
  }
  const size_t n = std::min(pieces.size(), static_cast<size_t>(std::max(streams, 1)));
  std::vector<std::vector<wire::FileRange>> groups(n);
  if (n == 0) return groups;
  std::stable_sort(
      pieces.begin(), pieces.end(),
      [](const wire::FileRange& a, const wire::FileRange& b) { return a.length > b.length; });
  std::vector<uint64_t> load(n, 0);
  for (const wire::FileRange& p : pieces) {
    const size_t g = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    groups[g].push_back(p);
    load[g] += p.length;
  }
  for (auto& g : groups) std::sort(g.begin(), g.end());
  return groups;
}

uint64_t TotalLength(const std::vector<wire::FileRange>& ranges) {
  uint64_t total = 0;
  for (const wire::FileRange& r : ranges) total += r.length;
  return total;
}

}  // namespace strata::agent
