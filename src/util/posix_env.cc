// Copyright 2026 The Strata Authors.
//
// The POSIX Env. Every failure names the path and the operation.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "strata/env.h"
#include "util/file_util.h"
#include "util/unique_fd.h"

namespace strata {
namespace {

Status PathError(const std::string& op, const std::string& path, int err) {
  return ErrnoToStatus(err, op + " " + path);
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status PWrite(uint64_t offset, const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::pwrite(fd_.get(), p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return PathError("write", path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
      return PathError("truncate", path_, errno);
    }
    return Status::Ok();
  }

  Status Allocate(uint64_t size) override {
    if (size == 0) return Status::Ok();
    if (::fallocate(fd_.get(), 0, 0, static_cast<off_t>(size)) == 0) return Status::Ok();
    if (errno == EOPNOTSUPP) return UnimplementedError("fallocate on " + path_);
    return PathError("allocate " + std::to_string(size) + " bytes of", path_, errno);
  }

  Status Sync() override {
    if (::fdatasync(fd_.get()) != 0) return PathError("fsync", path_, errno);
    return Status::Ok();
  }

  Status Close() override {
    const int fd = fd_.Release();
    if (fd >= 0 && ::close(fd) != 0) return PathError("close", path_, errno);
    return Status::Ok();
  }

  StatusOr<std::byte*> MapShared(uint64_t size, void* at) override {
    const int flags = MAP_SHARED | (at != nullptr ? MAP_FIXED : 0);
    void* p = ::mmap(at, size, PROT_READ | PROT_WRITE, flags, fd_.get(), 0);
    if (p == MAP_FAILED)
      return PathError("map " + std::to_string(size) + " bytes of", path_, errno);
    return static_cast<std::byte*>(p);
  }

 private:
  std::string path_;
  UniqueFd fd_;
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status PRead(uint64_t offset, size_t n, void* dst) const override {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_.get(), p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PathError("read", path_, errno);
      }
      if (r == 0) {
        return DataLossError("read " + path_ + ": file ends at offset " + std::to_string(offset) +
                             ", " + std::to_string(n) + " bytes short");
      }
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

  StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return PathError("stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  StatusOr<const std::byte*> MapShared(uint64_t size, void* at) const override {
    const int flags = MAP_SHARED | (at != nullptr ? MAP_FIXED : 0);
    void* p = ::mmap(at, size, PROT_READ, flags, fd_.get(), 0);
    if (p == MAP_FAILED)
      return PathError("map " + std::to_string(size) + " bytes of", path_, errno);
    return static_cast<const std::byte*>(p);
  }

 private:
  std::string path_;
  UniqueFd fd_;
};

class PosixEnv final : public Env {
 public:
  StatusOr<std::unique_ptr<WritableFile>> OpenWritable(const std::string& path) override {
    // Read and write: a shared writable mapping (MapShared) needs both.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return PathError("open for writing", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  StatusOr<std::unique_ptr<WritableFile>> CreateWritable(const std::string& path) override {
    STRATA_ASSIGN_OR_RETURN(int fd, CreateExclusive(path, 0644));
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PathError("open", path, errno);
    return std::unique_ptr<ReadableFile>(new PosixReadableFile(path, fd));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return PathError("mkdir", path, errno);
    }
    return Status::Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PathError("rename to " + to + ":", from, errno);
    }
    return Status::Ok();
  }

  Status SyncDir(const std::string& path) override {
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return PathError("open directory", path, errno);
    if (::fsync(fd.get()) != 0) return PathError("fsync directory", path, errno);
    return Status::Ok();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return PathError("unlink", path, errno);
    return Status::Ok();
  }

  Status RemoveAll(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      return errno == ENOENT ? Status::Ok() : PathError("stat", path, errno);
    }
    if (!S_ISDIR(st.st_mode)) return RemoveFile(path);
    STRATA_ASSIGN_OR_RETURN(auto entries, ListDir(path));
    for (const auto& e : entries) STRATA_RETURN_IF_ERROR(RemoveAll(path + "/" + e.name));
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return PathError("rmdir", path, errno);
    return Status::Ok();
  }

  StatusOr<std::vector<DirEntry>> ListDir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return PathError("list directory", path, errno);
    std::vector<DirEntry> out;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      out.push_back({std::move(name), TypeOf(path, *e)});
    }
    ::closedir(d);
    return out;
  }

  bool Exists(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  }

  StatusOr<FileIdentity> Identify(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return PathError("stat", path, errno);
    if (!S_ISREG(st.st_mode)) return FailedPreconditionError(path + " is not a regular file");
    constexpr int64_t kNs = 1000000000;
    return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                        static_cast<uint64_t>(st.st_size),
                        st.st_mtim.tv_sec * kNs + st.st_mtim.tv_nsec,
                        st.st_ctim.tv_sec * kNs + st.st_ctim.tv_nsec};
  }

 private:
  static DirEntry::Type TypeOf(const std::string& dir, const struct dirent& e) {
    unsigned char t = e.d_type;
    if (t == DT_UNKNOWN) {
      struct stat st;
      if (::lstat((dir + "/" + e.d_name).c_str(), &st) != 0) return DirEntry::Type::kOther;
      if (S_ISREG(st.st_mode)) return DirEntry::Type::kFile;
      if (S_ISDIR(st.st_mode)) return DirEntry::Type::kDirectory;
      if (S_ISLNK(st.st_mode)) return DirEntry::Type::kSymlink;
      return DirEntry::Type::kOther;
    }
    if (t == DT_REG) return DirEntry::Type::kFile;
    if (t == DT_DIR) return DirEntry::Type::kDirectory;
    if (t == DT_LNK) return DirEntry::Type::kSymlink;
    return DirEntry::Type::kOther;
  }
};

}  // namespace

Status WritableFile::Allocate(uint64_t) {
  return UnimplementedError("allocating a file's storage");
}

StatusOr<std::byte*> WritableFile::MapShared(uint64_t, void*) {
  return UnimplementedError("this Env's files cannot be mapped");
}

StatusOr<const std::byte*> ReadableFile::MapShared(uint64_t, void*) const {
  return UnimplementedError("this Env's files cannot be mapped");
}

StatusOr<FileIdentity> Env::Identify(const std::string& path) {
  return UnimplementedError("this Env cannot identify " + path + " without reading it");
}

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();  // never destroyed: used by detached threads
  return env;
}

}  // namespace strata
