// Copyright 2026 The Strata Authors.
#include "agent/store/stream_verify.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <system_error>

#include "format/manifest.h"
#include "format/naming.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/ram_disk.h"
#include "util/unique_fd.h"

namespace strata::agent {
namespace {

// pread hashes a range in pieces of this size (a chunk may be up to 1 GiB).
constexpr uint64_t kReadPiece = 1ull << 20;

// Every 16 MiB chunk of every file, against the index's checksums.
wire::RangePlan IndexChecks(const StepIndex& index) {
  wire::RangePlan plan;
  plan.files.resize(index.files.size());
  for (size_t f = 0; f < index.files.size(); ++f) {
    const IndexedFile& file = index.files[f];
    for (size_t c = 0; c < file.chunk_xxh3.size(); ++c) {
      const uint64_t off = c * kIndexChunkBytes;
      plan.files[f].push_back(
          {off, std::min(kIndexChunkBytes, file.size - off), file.chunk_xxh3[c], -1, c});
    }
  }
  return plan;
}

// Every chunk of every item of `manifest`, in the index's file positions.
StatusOr<wire::RangePlan> ManifestChecks(const StepIndex& index, const StepInfo& manifest) {
  if (manifest.ContentDigest() != index.digest) {
    return DataLossError("the manifest does not match the copy's digest " + Hex64(index.digest));
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<size_t> position, ManifestDataPositions(index, manifest));
  wire::RangePlan plan;
  plan.files.resize(index.files.size());
  for (const ItemInfo& item : manifest.items) {
    if (item.file >= position.size()) {
      return DataLossError("item '" + item.name + "' names no data file of the manifest");
    }
    const uint64_t size = index.files[position[item.file]].size;
    if (item.offset > size || item.nbytes > size - item.offset ||
        item.chunk_xxh3.size() != ChunkCount(item.nbytes, manifest.chunk_size)) {
      return DataLossError("item '" + item.name + "' does not fit its data file " +
                           manifest.files[item.file].name);
    }
    const auto id = static_cast<int64_t>(plan.item_names.size());
    plan.item_names.push_back(item.name);
    for (size_t c = 0; c < item.chunk_xxh3.size(); ++c) {
      const uint64_t within = c * manifest.chunk_size;
      plan.files[position[item.file]].push_back(
          {item.offset + within, std::min(manifest.chunk_size, item.nbytes - within),
           item.chunk_xxh3[c], id, c});
    }
  }
  return plan;
}

std::string RangeName(uint64_t offset, uint64_t end) {
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(end) + ")";
}

}  // namespace

StatusOr<wire::RangePlan> PlanRangeChecks(const StepIndex& index, const StepInfo* manifest) {
  wire::RangePlan plan;
  if (manifest == nullptr) {
    plan = IndexChecks(index);
  } else {
    STRATA_ASSIGN_OR_RETURN(plan, ManifestChecks(index, *manifest));
  }
  for (auto& file : plan.files) {
    std::stable_sort(
        file.begin(), file.end(),
        [](const wire::RangeCheck& a, const wire::RangeCheck& b) { return a.end() < b.end(); });
  }
  return plan;
}

StreamVerifier::StreamVerifier(std::string dir, const StepIndex& index, wire::RangePlan plan,
                               int threads, Read read)
    : dir_(std::move(dir)), plan_(std::move(plan)) {
  mapped_ = read == Read::kMapped || (read == Read::kAuto && IsTmpfs(dir_));
  plan_.files.resize(index.files.size());
  submitted_.resize(plan_.files.size());
  for (size_t f = 0; f < index.files.size(); ++f) {
    paths_.push_back(index.files[f].path);
    position_[index.files[f].path] = f;
    submitted_[f].assign(plan_.files[f].size(), false);
  }
  workers_.reserve(static_cast<size_t>(std::max(threads, 0)));
  for (int i = 0; i < threads; ++i) {
    try {
      workers_.emplace_back([this] { WorkerMain(); });
    } catch (const std::system_error&) {
      break;  // fewer threads; with none, Submit checks on the caller's thread
    }
  }
}

StreamVerifier::~StreamVerifier() {
  {
    MutexLock l(&mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.SignalAll();
  for (auto& t : workers_) t.join();
}

const std::vector<wire::RangeCheck>& StreamVerifier::ChecksFor(const std::string& path) const {
  static const std::vector<wire::RangeCheck> kNone;
  auto it = position_.find(path);
  return it == position_.end() ? kNone : plan_.files[it->second];
}

void StreamVerifier::Submit(const std::string& path, size_t first, size_t last) {
  auto it = position_.find(path);
  if (it == position_.end()) return;
  const size_t file = it->second;
  last = std::min(last, plan_.files[file].size());
  std::vector<Task> inline_tasks;
  {
    MutexLock l(&mu_);
    // One task per run of checks not submitted before.
    for (size_t c = first; c < last;) {
      if (submitted_[file][c]) {
        ++c;
        continue;
      }
      Task task{file, c, c};
      while (task.last < last && !submitted_[file][task.last]) submitted_[file][task.last++] = true;
      c = task.last;
      ++pending_;
      if (workers_.empty()) {
        inline_tasks.push_back(task);
      } else {
        queue_.push_back(task);
      }
    }
  }
  cv_.SignalAll();
  for (const Task& t : inline_tasks) Finished(Run(t));
}

void StreamVerifier::WorkerMain() {
  MutexLock l(&mu_);
  for (;;) {
    while (!stop_ && queue_.empty()) cv_.Wait(&mu_);
    if (stop_) return;
    Task task = queue_.front();
    queue_.pop_front();
    const bool skip = !error_.ok();  // a failure already decided the outcome
    l.Unlock();
    Finished(skip ? Status::Ok() : Run(task));
    l.Lock();
  }
}

void StreamVerifier::Finished(const Status& s) {
  bool first_failure = false;
  {
    MutexLock l(&mu_);
    if (!s.ok() && error_.ok()) {
      error_ = s;
      first_failure = true;
    }
  }
  // Before the task counts as done, so Wait() returns after the callback.
  if (first_failure && on_failure_) on_failure_();
  {
    MutexLock l(&mu_);
    --pending_;
  }
  done_.SignalAll();
}

Status StreamVerifier::Mismatch(const std::string& path, const wire::RangeCheck& c) const {
  std::string what = path + " " + RangeName(c.offset, c.end()) + " (";
  if (c.item >= 0) what += "item '" + plan_.item_names[static_cast<size_t>(c.item)] + "' ";
  what += "chunk " + std::to_string(c.chunk) + "): checksum mismatch";
  return DataLossError(what);
}

Status StreamVerifier::Run(const Task& t) const {
  const std::string& path = paths_[t.file];
  const std::string full = JoinPath(dir_, path);
  const UniqueFd fd(::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoToStatus(errno, "open " + full + " to verify it");
  return mapped_ ? HashMapped(fd.get(), t, path) : HashRead(fd.get(), t, path);
}

// The checks of `t` from one mapping of the span they cover: the pages
// were just written, and hashing them in place saves copying them out
// (CPU the receiving streams need). Only on a tmpfs, whose pages cannot
// fail to read back (a read error through a mapping is SIGBUS).
Status StreamVerifier::HashMapped(int fd, const Task& t, const std::string& path) const {
  const auto& checks = plan_.files[t.file];
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t c = t.first; c < t.last; ++c) {
    lo = std::min(lo, checks[c].offset);
    hi = std::max(hi, checks[c].end());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, "stat " + JoinPath(dir_, path));
  if (static_cast<uint64_t>(st.st_size) < hi) {
    return DataLossError(path + " ends at " + std::to_string(st.st_size) + " bytes, before " +
                         RangeName(lo, hi));
  }
  if (hi == lo) {  // empty ranges only
    for (size_t c = t.first; c < t.last; ++c) {
      if (Xxh3(nullptr, 0) != checks[c].xxh3) return Mismatch(path, checks[c]);
    }
    return Status::Ok();
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = lo / page * page;
  const size_t span = static_cast<size_t>(hi - start);
  void* map = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (map == MAP_FAILED) return ErrnoToStatus(errno, "map " + JoinPath(dir_, path));
  const auto* base = static_cast<const std::byte*>(map);
  Status s;
  for (size_t c = t.first; c < t.last && s.ok(); ++c) {
    if (Xxh3(base + (checks[c].offset - start), checks[c].length) != checks[c].xxh3) {
      s = Mismatch(path, checks[c]);
    }
  }
  ::munmap(map, span);
  return s;
}

// The checks of `t` read with pread, a piece at a time.
Status StreamVerifier::HashRead(int fd, const Task& t, const std::string& path) const {
  auto buf = std::make_unique_for_overwrite<std::byte[]>(kReadPiece);
  for (size_t c = t.first; c < t.last; ++c) {
    const wire::RangeCheck& check = plan_.files[t.file][c];
    Xxh3Stream hash;
    for (uint64_t done = 0; done < check.length;) {
      const size_t want = static_cast<size_t>(std::min(kReadPiece, check.length - done));
      ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(check.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus(errno, "read " + JoinPath(dir_, path));
      if (n == 0) {
        return DataLossError(path + " ends before " + RangeName(check.offset, check.end()));
      }
      hash.Update(buf.get(), static_cast<size_t>(n));
      done += static_cast<uint64_t>(n);
    }
    if (hash.Digest() != check.xxh3) return Mismatch(path, check);
  }
  return Status::Ok();
}

Status StreamVerifier::Wait() {
  MutexLock l(&mu_);
  while (pending_ != 0) done_.Wait(&mu_);
  return error_;
}

Status StreamVerifier::Finish() {
  STRATA_RETURN_IF_ERROR(Wait());
  MutexLock l(&mu_);
  for (size_t f = 0; f < submitted_.size(); ++f) {
    for (size_t c = 0; c < submitted_[f].size(); ++c) {
      if (!submitted_[f][c]) {
        const wire::RangeCheck& check = plan_.files[f][c];
        return DataLossError(paths_[f] + " " + RangeName(check.offset, check.end()) +
                             ": never received, so never verified");
      }
    }
  }
  return Status::Ok();
}

}  // namespace strata::agent
