// Copyright 2026 The Strata Authors.
//
// What backs a checkpoint directory (the agent's, a checkpointer's). A
// tmpfs gives every file 4 KiB pages unless it is mounted with
// huge=within_size (or huge=always); with huge pages, writing a step into
// new files, mapping it and reading it back take a fraction of the time
// (docs/performance.md), so the agent and the checkpointer say at start
// when their directory could use them.
#ifndef STRATA_UTIL_RAM_DISK_H_
#define STRATA_UTIL_RAM_DISK_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata {

struct RamDisk {
  bool tmpfs = false;
  // The mount's huge= option ("never" when absent), or the system-wide
  // override from /sys/kernel/mm/transparent_hugepage/shmem_enabled
  // ("deny", "force"). Empty when not a tmpfs or unknown.
  std::string huge;
  // Would files written here get huge pages? ("advise" only gives them to
  // memory mapped with madvise, not to written files: the checkpointer's
  // step files get them, engine/step_slot.h.)
  bool HugePages() const {
    return tmpfs && (huge == "within_size" || huge == "always" || huge == "force");
  }
};

// Describes the file system holding `dir` (which must exist).
RamDisk DescribeRamDisk(const std::string& dir);
// Whether `dir` is on a tmpfs (false when it cannot be told).
bool IsTmpfs(const std::string& dir);

// Refuses `bytes` more, and `margin` bytes besides, than `dir`'s file
// system has free for a non-root user, before any of them is written: a
// RAM disk filled even for a moment fails the writes of everything else on
// it (the node's saves, the agent's replicas), where it would not fit
// anyway. RESOURCE_EXHAUSTED naming `what`, `dir` and both figures. OK on
// a file system that reports no size (ramfs, a tmpfs mounted size=0):
// nothing but memory limits it.
Status CheckFreeSpace(const std::string& dir, uint64_t bytes, const std::string& what,
                      uint64_t margin = 0);
// The bytes of storage `path` holds (its allocated blocks: a file's pages
// on a tmpfs); 0 when it does not exist.
uint64_t BytesHeld(const std::string& path);

// The huge= option of the tmpfs with device `device` ("major:minor", as
// stat's st_dev) in /proc/self/mountinfo text: "never" when it has none,
// empty when no tmpfs has that device. Mount options of one file system
// are the same on every line (bind mounts) that shows it. Exposed for
// tests.
std::string TmpfsHugeOption(std::string_view mountinfo, std::string_view device);

}  // namespace strata

#endif  // STRATA_UTIL_RAM_DISK_H_
