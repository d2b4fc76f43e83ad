// Copyright 2026 The Strata Authors.
#include "agent/stream_verify.h"

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

namespace strata::agent {
namespace {

std::string RangeName(uint64_t offset, uint64_t length) {
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + length) + ")";
}

// Every 16 MiB chunk of every file, against the index's checksums.
std::vector<std::vector<RangeCheck>> IndexChecks(const StepIndex& index) {
  std::vector<std::vector<RangeCheck>> checks(index.files.size());
  for (size_t f = 0; f < index.files.size(); ++f) {
    const IndexedFile& file = index.files[f];
    for (size_t c = 0; c < file.chunk_xxh3.size(); ++c) {
      uint64_t off = c * kIndexChunkBytes;
      checks[f].push_back({off, std::min(kIndexChunkBytes, file.size - off), file.chunk_xxh3[c],
                           "chunk " + std::to_string(c)});
    }
  }
  return checks;
}

// Every chunk of every item of `manifest`, in the index's file positions.
StatusOr<std::vector<std::vector<RangeCheck>>> ManifestChecks(const StepIndex& index,
                                                              const StepInfo& manifest) {
  if (manifest.ContentDigest() != index.digest) {
    return DataLossError("the manifest does not match the copy's digest " + Hex64(index.digest));
  }
  std::vector<size_t> position(manifest.files.size());
  for (size_t m = 0; m < manifest.files.size(); ++m) {
    auto it = std::find_if(index.files.begin(), index.files.end(),
                           [&](const IndexedFile& f) { return f.path == manifest.files[m].name; });
    if (it == index.files.end()) {
      return DataLossError("the manifest's data file " + manifest.files[m].name +
                           " is not in the copy's index");
    }
    position[m] = static_cast<size_t>(it - index.files.begin());
  }
  std::vector<std::vector<RangeCheck>> checks(index.files.size());
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
    for (size_t c = 0; c < item.chunk_xxh3.size(); ++c) {
      uint64_t within = c * manifest.chunk_size;
      checks[position[item.file]].push_back(
          {item.offset + within, std::min(manifest.chunk_size, item.nbytes - within),
           item.chunk_xxh3[c], "item '" + item.name + "' chunk " + std::to_string(c)});
    }
  }
  return checks;
}

// XXH3-64 of `length` bytes of the file at `path` from `offset`, read
// through a mapping: the pages were just written, and hashing them in place
// saves copying them out (CPU the receiving streams need).
StatusOr<uint64_t> HashRange(const std::string& path, uint64_t offset, uint64_t length) {
  if (length == 0) return Xxh3(nullptr, 0);
  const std::string what = path + " " + RangeName(offset, length);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return DataLossError(what + ": " + ErrnoToStatus(errno, "open").message());
  struct stat st;
  const bool fits = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= offset &&
                    static_cast<uint64_t>(st.st_size) - offset >= length;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  void* map = fits ? ::mmap(nullptr, length + (offset - start), PROT_READ, MAP_SHARED, fd,
                            static_cast<off_t>(start))
                   : MAP_FAILED;
  ::close(fd);
  if (!fits) return DataLossError(what + ": the file is shorter");
  if (map == MAP_FAILED) return DataLossError(what + ": " + ErrnoToStatus(errno, "mmap").message());
  uint64_t hash = Xxh3(static_cast<const std::byte*>(map) + (offset - start), length);
  ::munmap(map, length + (offset - start));
  return hash;
}

}  // namespace

StatusOr<std::vector<std::vector<RangeCheck>>> PlanRangeChecks(const StepIndex& index,
                                                               const StepInfo* manifest) {
  std::vector<std::vector<RangeCheck>> checks;
  if (manifest == nullptr) {
    checks = IndexChecks(index);
  } else {
    STRATA_ASSIGN_OR_RETURN(checks, ManifestChecks(index, *manifest));
  }
  for (auto& file : checks) {
    std::stable_sort(file.begin(), file.end(),
                     [](const RangeCheck& a, const RangeCheck& b) { return a.end() < b.end(); });
  }
  return checks;
}

StreamVerifier::StreamVerifier(std::string dir, const StepIndex& index,
                               std::vector<std::vector<RangeCheck>> checks, int threads)
    : dir_(std::move(dir)), checks_(std::move(checks)) {
  checks_.resize(index.files.size());
  submitted_.resize(checks_.size());
  for (size_t f = 0; f < index.files.size(); ++f) {
    paths_.push_back(index.files[f].path);
    position_[index.files[f].path] = f;
    submitted_[f].assign(checks_[f].size(), false);
  }
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
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

const std::vector<RangeCheck>& StreamVerifier::ChecksFor(const std::string& path) const {
  static const std::vector<RangeCheck> kNone;
  auto it = position_.find(path);
  return it == position_.end() ? kNone : checks_[it->second];
}

void StreamVerifier::Submit(const std::string& path, size_t i) {
  auto it = position_.find(path);
  if (it == position_.end() || i >= checks_[it->second].size()) return;
  const Task task{it->second, i};
  {
    std::lock_guard<std::mutex> l(mu_);
    if (submitted_[task.file][task.check]) return;
    submitted_[task.file][task.check] = true;
    ++pending_;
    if (!workers_.empty()) {
      queue_.push_back(task);
      cv_.notify_one();
      return;
    }
  }
  Finished(Run(task));
}

void StreamVerifier::WorkerMain() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Task task = queue_.front();
    queue_.pop_front();
    const bool skip = !error_.ok();  // a mismatch already decided the outcome
    l.unlock();
    Status s = skip ? Status::Ok() : Run(task);
    Finished(s);
    l.lock();
  }
}

void StreamVerifier::Finished(const Status& s) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!s.ok() && error_.ok()) error_ = s;
    --pending_;
  }
  done_.notify_all();
}

Status StreamVerifier::Run(const Task& t) const {
  const RangeCheck& check = checks_[t.file][t.check];
  const std::string path = JoinPath(dir_, paths_[t.file]);
  const std::string what =
      path + " " + RangeName(check.offset, check.length) + " (" + check.what + ")";
  STRATA_ASSIGN_OR_RETURN(uint64_t hash, HashRange(path, check.offset, check.length));
  if (hash != check.xxh3) return DataLossError(what + ": checksum mismatch");
  return Status::Ok();
}

Status StreamVerifier::Finish() {
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return pending_ == 0; });
  if (!error_.ok()) return error_;
  for (size_t f = 0; f < submitted_.size(); ++f) {
    for (size_t c = 0; c < submitted_[f].size(); ++c) {
      if (!submitted_[f][c]) {
        return DataLossError(JoinPath(dir_, paths_[f]) + " (" + checks_[f][c].what +
                             "): never received, so never verified");
      }
    }
  }
  return Status::Ok();
}

}  // namespace strata::agent
