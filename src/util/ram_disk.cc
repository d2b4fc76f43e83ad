// Copyright 2026 The Strata Authors.
#include "util/ram_disk.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include "util/file_util.h"

namespace strata {
namespace {

// The fields of a mountinfo line, split on single spaces (a field may be
// empty; spaces inside one are escaped as \040).
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> f;
  for (size_t at = 0;;) {
    size_t space = line.find(' ', at);
    f.push_back(line.substr(at, space == std::string_view::npos ? line.npos : space - at));
    if (space == std::string_view::npos) return f;
    at = space + 1;
  }
}

// The value of `key`= in a comma-separated option list, or "".
std::string Option(std::string_view options, std::string_view key) {
  for (size_t at = 0; at <= options.size();) {
    size_t comma = options.find(',', at);
    std::string_view o = options.substr(at, comma == options.npos ? options.npos : comma - at);
    if (o.size() > key.size() && o.starts_with(key) && o[key.size()] == '=')
      return std::string(o.substr(key.size() + 1));
    if (comma == options.npos) break;
    at = comma + 1;
  }
  return "";
}

// A /proc or /sys file (its stat size is 0 or a page), "" if unreadable.
std::string ReadProcFile(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string TmpfsHugeOption(std::string_view mountinfo, std::string_view device) {
  // id parent major:minor root mount-point options [optional...] - fstype source super-options
  for (size_t at = 0; at < mountinfo.size();) {
    size_t end = mountinfo.find('\n', at);
    if (end == mountinfo.npos) end = mountinfo.size();
    std::vector<std::string_view> f = Fields(mountinfo.substr(at, end - at));
    at = end + 1;
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size() || f[2] != device || f[dash + 1] != "tmpfs") continue;
    std::string huge = Option(f[dash + 3], "huge");
    return huge.empty() ? "never" : huge;
  }
  return "";
}

Status CheckFreeSpace(const std::string& dir, uint64_t bytes, const std::string& what,
                      uint64_t margin) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return ErrnoToStatus(errno, "statvfs " + dir);
  if (st.f_blocks == 0) return Status::Ok();  // no size to fill
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (bytes <= free_bytes && margin <= free_bytes - bytes) return Status::Ok();
  return ResourceExhaustedError(
      "no room for " + what + " in " + dir + ": " + std::to_string(bytes) + " bytes needed" +
      (margin > 0 ? " and " + std::to_string(margin) + " kept free" : std::string()) + ", " +
      std::to_string(free_bytes) + " free");
}

uint64_t BytesHeld(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

bool IsTmpfs(const std::string& dir) { return FilesystemType(dir) == TMPFS_MAGIC; }

RamDisk DescribeRamDisk(const std::string& dir) {
  RamDisk d;
  struct stat st {};
  if (!IsTmpfs(dir)) return d;
  d.tmpfs = true;
  if (::stat(dir.c_str(), &st) == 0) {
    std::string device = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    d.huge = TmpfsHugeOption(ReadProcFile("/proc/self/mountinfo"), device);
  }
  // A system-wide override: "[deny]" or "[force]" selected.
  std::string shmem = ReadProcFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  if (shmem.find("[deny]") != std::string::npos) d.huge = "deny";
  if (shmem.find("[force]") != std::string::npos) d.huge = "force";
  return d;
}

}  // namespace strata
