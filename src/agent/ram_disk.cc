// Copyright 2026 The Strata Authors.
#include "agent/ram_disk.h"

#include <linux/magic.h>
#include <sys/vfs.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace strata::agent {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t k) { return i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7'; };
    if (s[i] == '\\' && octal(1) && octal(2) && octal(3)) {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Is `mount_point` `dir` or an ancestor of it?
bool Covers(const std::string& mount_point, const std::string& dir) {
  if (mount_point == "/") return true;
  return dir == mount_point || (dir.starts_with(mount_point) && dir.size() > mount_point.size() &&
                                dir[mount_point.size()] == '/');
}

std::vector<std::string> Fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

// The value of `key`= in a comma-separated option list, or "".
std::string Option(const std::string& options, std::string_view key) {
  std::istringstream in(options);
  for (std::string o; std::getline(in, o, ',');) {
    if (o.size() > key.size() && o.starts_with(key) && o[key.size()] == '=')
      return o.substr(key.size() + 1);
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

std::string TmpfsHugeOption(std::string_view mountinfo, const std::string& dir) {
  // id parent major:minor root mount-point options [optional...] - fstype source super-options
  std::istringstream in{std::string(mountinfo)};
  size_t best = 0;
  std::string huge;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = Fields(line);
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 3 >= f.size()) continue;
    std::string mount_point = Unescape(f[4]);
    // The last mount of the longest covering point is the visible one.
    if (!Covers(mount_point, dir) || mount_point.size() < best) continue;
    best = mount_point.size();
    if (f[dash + 1] != "tmpfs") {
      huge.clear();
      continue;
    }
    std::string h = Option(f[dash + 3], "huge");
    huge = h.empty() ? "never" : h;
  }
  return huge;
}

RamDisk DescribeRamDisk(const std::string& dir) {
  RamDisk d;
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0 || fs.f_type != TMPFS_MAGIC) return d;
  d.tmpfs = true;
  std::error_code ec;
  std::string canonical = std::filesystem::canonical(dir, ec).string();
  if (!ec) d.huge = TmpfsHugeOption(ReadProcFile("/proc/self/mountinfo"), canonical);
  // A system-wide override: "[deny]" or "[force]" selected.
  std::string shmem = ReadProcFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  if (shmem.find("[deny]") != std::string::npos) d.huge = "deny";
  if (shmem.find("[force]") != std::string::npos) d.huge = "force";
  return d;
}

}  // namespace strata::agent
