// Copyright 2026 The Strata Authors.
#include "storage/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "storage/rate_limiter.h"
#include "util/file_util.h"
#include "util/unique_fd.h"

namespace strata::storage {
namespace {

constexpr size_t kCopyBufferBytes = size_t{8} << 20;
constexpr size_t kCopyCallBytes = size_t{1} << 30;     // per copy_file_range/sendfile call
constexpr size_t kLimitedCopyBytes = size_t{1} << 20;  // per call under a bandwidth limit

std::vector<std::string> SplitKey(std::string_view key) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= key.size()) {
    size_t end = std::min(key.find('/', begin), key.size());
    parts.emplace_back(key.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoToStatus(errno, "write");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Copies `size` bytes from the current offsets of `in` to `out`, at most as
// fast as `limiter` allows (when given). DATA_LOSS if `in` ends early (the
// source shrank while being copied).
Status CopyFd(int in, int out, uint64_t size, RateLimiter* limiter = nullptr) {
  enum { kCopyRange, kSendfile, kReadWrite } method = kCopyRange;
  std::unique_ptr<char[]> buf;
  uint64_t done = 0;
  while (done < size) {
    size_t want = static_cast<size_t>(
        std::min<uint64_t>(size - done, limiter ? kLimitedCopyBytes : kCopyCallBytes));
    if (limiter) limiter->Acquire(want);
    ssize_t n = -1;
    if (method == kCopyRange) {
      n = ::copy_file_range(in, nullptr, out, nullptr, want, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
                    errno == EBADF)) {
        method = kSendfile;
        continue;
      }
    } else if (method == kSendfile) {
      n = ::sendfile(out, in, nullptr, want);
      if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
        method = kReadWrite;
        continue;
      }
    } else {
      if (!buf) buf.reset(new char[kCopyBufferBytes]);
      n = ::read(in, buf.get(), std::min(want, kCopyBufferBytes));
      if (n > 0) STRATA_RETURN_IF_ERROR(WriteAll(out, buf.get(), static_cast<size_t>(n)));
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "copy");
    if (n == 0) {
      return DataLossError("source ended after " + std::to_string(done) + " of " +
                           std::to_string(size) + " bytes (changed while being copied?)");
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

class FileStore : public ObjectStore {
 public:
  FileStore(std::string url, std::string root, UniqueFd root_fd, uint64_t upload_bytes_per_second)
      : url_(std::move(url)), root_(std::move(root)), root_fd_(std::move(root_fd)) {
    if (upload_bytes_per_second > 0) {
      limiter_ = std::make_unique<RateLimiter>(upload_bytes_per_second);
    }
  }

  const std::string& url() const override { return url_; }

  Status Put(const std::string& key, std::string_view data) override {
    return Write("Put", key, [&](int fd) { return WriteAll(fd, data.data(), data.size()); });
  }

  Status PutFile(const std::string& key, const std::string& path) override {
    UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (!in.valid() || ::fstat(in.get(), &st) != 0) {
      return ErrnoToStatus(errno, Context("PutFile", key) + ": open " + path);
    }
    return Write("PutFile", key, [&](int fd) {
      Status s = CopyFd(in.get(), fd, static_cast<uint64_t>(st.st_size), limiter_.get());
      return s.ok() ? s : s.WithContext("from " + path);
    });
  }

  StatusOr<std::string> Get(const std::string& key) override {
    STRATA_ASSIGN_OR_RETURN(UniqueFd in, OpenObject("Get", key));
    struct stat st;
    if (::fstat(in.get(), &st) != 0) return ErrnoToStatus(errno, Context("Get", key));
    std::string out(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::read(in.get(), out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus(errno, Context("Get", key));
      if (n == 0) return DataLossError(Context("Get", key) + ": file shrank while being read");
      done += static_cast<size_t>(n);
    }
    return out;
  }

  StatusOr<uint64_t> GetFile(const std::string& key, const std::string& path) override {
    STRATA_ASSIGN_OR_RETURN(UniqueFd in, OpenObject("GetFile", key));
    struct stat st;
    if (::fstat(in.get(), &st) != 0) return ErrnoToStatus(errno, Context("GetFile", key));
    UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!out.valid()) return ErrnoToStatus(errno, Context("GetFile", key) + ": create " + path);
    auto size = static_cast<uint64_t>(st.st_size);
    Status s = CopyFd(in.get(), out.get(), size);
    if (!s.ok()) return s.WithContext(Context("GetFile", key) + " to " + path);
    return size;
  }

  StatusOr<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::string& key) override;
  Status CheckAccess() override;

 private:
  // "<url>: <op> <key>" for messages.
  std::string Context(std::string_view op, std::string_view key) const {
    return url_ + ": " + std::string(op) + " " + QuoteKey(key);
  }

  // Opens the directories of `parts` except the last, from the root down,
  // never following a symbolic link; with `create`, makes missing ones (and
  // fsyncs their parents). dirs[0] is the root; dirs[i] is parts[i - 1].
  Status OpenDirs(const std::vector<std::string>& parts, bool create, std::vector<UniqueFd>* dirs);
  // The object file of `key`, opened for reading (no symlink followed).
  StatusOr<UniqueFd> OpenObject(std::string_view op, const std::string& key);
  // The commit protocol around `fill`, which writes the temp file's bytes.
  template <typename Fill>
  Status Write(std::string_view op, const std::string& key, Fill fill);
  Status Walk(int dir, const std::string& rel, const std::string& prefix,
              std::vector<ObjectInfo>* out);

  const std::string url_;
  const std::string root_;
  const UniqueFd root_fd_;
  std::unique_ptr<RateLimiter> limiter_;  // null: uploads are not limited
  std::atomic<uint64_t> temp_seq_{0};
  // Shared by writers between creating directories and the rename; exclusive
  // while Delete removes empty directories.
  std::shared_mutex dirs_mu_;
};

Status FileStore::OpenDirs(const std::vector<std::string>& parts, bool create,
                           std::vector<UniqueFd>* dirs) {
  dirs->clear();
  dirs->emplace_back(::dup(root_fd_.get()));
  if (!dirs->back().valid()) return ErrnoToStatus(errno, "dup " + root_);
  std::string path = root_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    int parent = dirs->back().get();
    path += "/" + parts[i];
    constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = ::openat(parent, parts[i].c_str(), kFlags);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(parent, parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoToStatus(errno, "mkdir " + path);
      }
      if (::fsync(parent) != 0) return ErrnoToStatus(errno, "fsync directory of " + path);
      fd = ::openat(parent, parts[i].c_str(), kFlags);
    }
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
      struct stat st;
      if (::fstatat(parent, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(st.st_mode)) {
        return PermissionDeniedError(path + " is a symbolic link; links are not followed");
      }
    }
    if (fd < 0) return ErrnoToStatus(errno, "open directory " + path);
    dirs->emplace_back(fd);
  }
  return Status::Ok();
}

StatusOr<UniqueFd> FileStore::OpenObject(std::string_view op, const std::string& key) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url_ + ": " + std::string(op));
  std::vector<std::string> parts = SplitKey(key);
  std::vector<UniqueFd> dirs;
  s = OpenDirs(parts, /*create=*/false, &dirs);
  if (s.code() == StatusCode::kNotFound)
    return NotFoundError(Context(op, key) + ": no such object");
  if (!s.ok()) return s.WithContext(Context(op, key));
  UniqueFd fd(::openat(dirs.back().get(), parts.back().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return NotFoundError(Context(op, key) + ": no such object");
    if (errno == ELOOP) {
      return PermissionDeniedError(Context(op, key) +
                                   ": is a symbolic link; links are not followed");
    }
    return ErrnoToStatus(errno, Context(op, key));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, Context(op, key));
  if (!S_ISREG(st.st_mode)) return NotFoundError(Context(op, key) + ": not a regular file");
  return fd;
}

template <typename Fill>
Status FileStore::Write(std::string_view op, const std::string& key, Fill fill) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url_ + ": " + std::string(op));
  std::vector<std::string> parts = SplitKey(key);
  std::shared_lock lock(dirs_mu_);
  std::vector<UniqueFd> dirs;
  s = OpenDirs(parts, /*create=*/true, &dirs);
  if (!s.ok()) return s.WithContext(Context(op, key));
  int dir = dirs.back().get();
  std::string tmp = std::string(kReservedTempPrefix) + std::to_string(::getpid()) + "-" +
                    std::to_string(temp_seq_.fetch_add(1));
  UniqueFd fd(
      ::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoToStatus(errno, Context(op, key) + ": create " + tmp);
  s = fill(fd.get());
  if (!s.ok()) {
    ::unlinkat(dir, tmp.c_str(), 0);
    return s.WithContext(Context(op, key));
  }
  s = CommitFileAt(dir, fd.Release(), tmp, parts.back());
  if (!s.ok()) return s.WithContext(Context(op, key));
  return Status::Ok();
}

Status FileStore::Walk(int dir, const std::string& rel, const std::string& prefix,
                       std::vector<ObjectInfo>* out) {
  UniqueFd fd(::dup(dir));
  DIR* d = fd.valid() ? ::fdopendir(fd.get()) : nullptr;
  if (d == nullptr) return ErrnoToStatus(errno, "list " + root_ + "/" + rel);
  fd.Release();  // the stream's now
  std::unique_ptr<DIR, int (*)(DIR*)> closer(d, ::closedir);
  ::rewinddir(d);
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || name.starts_with(kReservedTempPrefix)) continue;
    std::string key = rel + std::string(name);
    struct stat st;
    if (::fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      return ErrnoToStatus(errno, "stat " + root_ + "/" + key);
    }
    if (S_ISREG(st.st_mode)) {
      if (key.starts_with(prefix)) out->push_back({key, static_cast<uint64_t>(st.st_size)});
    } else if (S_ISDIR(st.st_mode)) {
      std::string sub = key + "/";
      if (!sub.starts_with(prefix) && !prefix.starts_with(sub)) continue;
      UniqueFd child(::openat(dir, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child.valid()) {
        if (errno == ENOENT) continue;
        return ErrnoToStatus(errno, "open directory " + root_ + "/" + key);
      }
      STRATA_RETURN_IF_ERROR(Walk(child.get(), sub, prefix, out));
    }  // symbolic links and special files are not objects
  }
  return Status::Ok();
}

StatusOr<std::vector<ObjectInfo>> FileStore::List(const std::string& prefix) {
  // Start at the deepest directory the prefix names completely.
  std::string dir_part = prefix.substr(0, prefix.rfind('/') + 1);  // "" or "a/b/"
  std::vector<ObjectInfo> out;
  std::vector<UniqueFd> dirs;
  if (!dir_part.empty()) {
    Status s = ValidateObjectKey(std::string_view(dir_part).substr(0, dir_part.size() - 1));
    if (!s.ok()) return s.WithContext(url_ + ": List");
  }
  Status s = OpenDirs(SplitKey(dir_part), /*create=*/false, &dirs);
  if (s.code() == StatusCode::kNotFound) return out;
  if (s.ok()) s = Walk(dirs.back().get(), dir_part, prefix, &out);
  if (!s.ok()) return s.WithContext(url_ + ": List " + QuoteKey(prefix));
  std::sort(out.begin(), out.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Status FileStore::Delete(const std::string& key) {
  Status s = ValidateObjectKey(key);
  if (!s.ok()) return s.WithContext(url_ + ": Delete");
  std::vector<std::string> parts = SplitKey(key);
  std::unique_lock lock(dirs_mu_);
  std::vector<UniqueFd> dirs;
  s = OpenDirs(parts, /*create=*/false, &dirs);
  if (s.code() == StatusCode::kNotFound) return Status::Ok();
  if (!s.ok()) return s.WithContext(Context("Delete", key));
  if (::unlinkat(dirs.back().get(), parts.back().c_str(), 0) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return ErrnoToStatus(errno, Context("Delete", key));
  }
  // Remove the directories this left empty, deepest first, up to the root.
  size_t i = dirs.size() - 1;
  for (; i > 0; --i) {
    if (::unlinkat(dirs[i - 1].get(), parts[i - 1].c_str(), AT_REMOVEDIR) != 0) break;
  }
  if (::fsync(dirs[i].get()) != 0) return ErrnoToStatus(errno, Context("Delete", key) + ": fsync");
  return Status::Ok();
}

Status FileStore::CheckAccess() {
  std::string probe =
      ".strata-probe/" + std::to_string(::getpid()) + "-" + std::to_string(temp_seq_.fetch_add(1));
  STRATA_RETURN_IF_ERROR(List(".strata-probe/").status());
  STRATA_RETURN_IF_ERROR(Put(probe, "probe"));
  return Delete(probe);
}

}  // namespace

StatusOr<std::unique_ptr<ObjectStore>> OpenFileStore(const std::string& url,
                                                     const std::string& root,
                                                     const StoreOptions& options) {
  Status s = CreateDirs(Env::Default(), root);
  if (!s.ok()) return s.WithContext(url);
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, url + ": open " + root);
  return std::unique_ptr<ObjectStore>(
      new FileStore(url, root, std::move(fd), options.upload_bytes_per_second));
}

}  // namespace strata::storage
