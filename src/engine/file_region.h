// Copyright 2026 The Strata Authors.
//
// A step's data files mapped side by side into one region of address space:
// a StepSlot's (the pages a save copies into) and a restore's
// (VerifyMapped, after a restart).
//
// Each file starts at a huge page's boundary (2 MiB on x86-64). A tmpfs
// that backs files with huge pages (mounted with huge=within_size or
// huge=always, or huge=advise and asked through madvise) does so for a
// shared mapping only where the mapping's addresses line up with the
// file's huge pages; elsewhere it allocates and maps 4 KiB pages, one
// fault each. Lined up, making a step's
// files, faulting a restarted step in and unmapping it cost a fraction
// (docs/performance.md, "Huge pages for the step files"). The gaps between
// files are address space only: no memory, no access.
#ifndef STRATA_ENGINE_FILE_REGION_H_
#define STRATA_ENGINE_FILE_REGION_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strata/catalog.h"
#include "strata/status.h"
#include "util/thread_pool.h"

namespace strata {

// The system's base page size, and `n` rounded up to a multiple of it.
size_t PageSize();
uint64_t PageRound(uint64_t n);

// The boundary each file is placed at: the size of the huge page a tmpfs
// maps with one page-table entry (2 MiB with 4 KiB base pages, as on
// x86-64; 512 MiB with arm64's 64 KiB pages), read once from
// /sys/kernel/mm/transparent_hugepage/hpage_pmd_size; 2 MiB when unknown.
size_t FileAlignment();

// A region holding a step's data files, and the offset of each file in it.
struct HeldRegion {
  std::span<std::byte> region;
  std::vector<size_t> file_offset;
};

// Reserves address space for `files` (no memory, no access until a file is
// mapped over it): the region starts at a FileAlignment() boundary and each
// file at the next one after the previous file. Empty when every file is.
// `what` names the files for the error.
StatusOr<HeldRegion> ReserveFileRegion(const std::vector<FileInfo>& files, const std::string& what);

// Where each non-empty file of `files` is mapped in `held`: its size
// rounded up to the page.
std::vector<std::span<std::byte>> FileSpans(const HeldRegion& held,
                                            const std::vector<FileInfo>& files);

// Faults in the pages holding [p, p + n) of a mapping for reading, at once
// rather than a fault per few pages as they are read (advisory).
void FaultInForReading(const std::byte* p, uint64_t n);

// Whether this kernel has MADV_POPULATE_WRITE (Linux 5.14), so that
// PopulateForWriting reports a full file system rather than leaving a
// store to raise SIGBUS.
bool PopulatesForWriting();

// Faults in every page of `spans` for writing on `pool`, in 64 MiB pieces:
// a copy into fresh tmpfs pages otherwise takes a fault per page on the
// copying thread. Where the kernel has no MADV_POPULATE_WRITE (before Linux
// 5.14) a store of each page's first byte (its own value) does it. With
// the advice, pages the file system has no room for are RESOURCE_EXHAUSTED
// naming `what`; without it a store into one raises SIGBUS, so the files
// must have their room first (WritableFile::Allocate).
Status PopulateForWriting(ThreadPool* pool, std::span<const std::span<std::byte>> spans,
                          const std::string& what);

}  // namespace strata

#endif  // STRATA_ENGINE_FILE_REGION_H_
