// Copyright 2026 The Strata Authors.
#include "engine/file_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <fstream>

#include "util/file_util.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace strata {
namespace {

size_t RoundUp(uint64_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

size_t PageSize() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t PageRound(uint64_t n) { return RoundUp(n, PageSize()); }

size_t FileAlignment() {
  static const size_t alignment = [] {
    size_t n = 0;
    std::ifstream("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") >> n;
    const bool power_of_two = n != 0 && (n & (n - 1)) == 0;
    return power_of_two && n >= PageSize() && n <= (size_t{1} << 30) ? n : size_t{2} << 20;
  }();
  return alignment;
}

StatusOr<HeldRegion> ReserveFileRegion(const std::vector<FileInfo>& files,
                                       const std::string& what) {
  HeldRegion out;
  size_t total = 0;
  for (const FileInfo& f : files) {
    out.file_offset.push_back(total);
    total += RoundUp(f.size, FileAlignment());
  }
  if (total == 0) return out;
  // Over-reserved by one boundary, then trimmed to start at one.
  const size_t asked = total + FileAlignment();
  void* p = ::mmap(nullptr, asked, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoToStatus(
        errno, "reserving " + std::to_string(total) + " bytes of address space for " + what);
  }
  const auto at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = RoundUp(at, FileAlignment());
  if (start > at) ::munmap(p, start - at);
  const size_t tail = at + asked - (start + total);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(start + total), tail);
  out.region = std::span<std::byte>(reinterpret_cast<std::byte*>(start), total);
  return out;
}

std::vector<std::span<std::byte>> FileSpans(const HeldRegion& held,
                                            const std::vector<FileInfo>& files) {
  std::vector<std::span<std::byte>> spans;
  for (size_t f = 0; f < files.size(); ++f) {
    if (files[f].size == 0) continue;
    spans.push_back(held.region.subspan(held.file_offset[f], PageRound(files[f].size)));
  }
  return spans;
}

void FaultInForReading(const std::byte* p, uint64_t n) {
  const auto first = reinterpret_cast<uintptr_t>(p) / PageSize() * PageSize();
  const uintptr_t end = PageRound(reinterpret_cast<uintptr_t>(p) + n);
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_READ);
}

bool PopulatesForWriting() {
  static const bool supported = [] {
    void* p =
        ::mmap(nullptr, PageSize(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    const bool ok = ::madvise(p, PageSize(), MADV_POPULATE_WRITE) == 0;
    ::munmap(p, PageSize());
    return ok;
  }();
  return supported;
}

Status PopulateForWriting(ThreadPool* pool, std::span<const std::span<std::byte>> spans,
                          const std::string& what) {
  constexpr size_t kPiece = 64 << 20;
  std::vector<std::span<std::byte>> pieces;
  for (std::span<std::byte> s : spans) {
    for (size_t off = 0; off < s.size(); off += kPiece) {
      pieces.push_back(s.subspan(off, std::min(kPiece, s.size() - off)));
    }
  }
  std::atomic<int> failed{0};  // the first errno
  pool->ParallelFor(pieces.size(), [&](size_t i) {
    std::span<std::byte> p = pieces[i];
    if (::madvise(p.data(), p.size(), MADV_POPULATE_WRITE) == 0) return;
    if (errno != EINVAL) {  // e.g. EFAULT: a store would raise SIGBUS (a full tmpfs)
      int none = 0;
      failed.compare_exchange_strong(none, errno);
      return;
    }
    for (size_t off = 0; off < p.size(); off += PageSize()) {
      auto* b = reinterpret_cast<volatile std::byte*>(p.data() + off);
      *b = *b;
    }
  });
  if (failed.load() == 0) return Status::Ok();
  if (failed.load() == EFAULT) {
    return ResourceExhaustedError("no page for " + what +
                                  " (the file system is full or at its memory limit, or the "
                                  "file cannot be written)");
  }
  return ErrnoToStatus(failed.load(), "faulting in the pages of " + what);
}

}  // namespace strata
