// Copyright 2026 The Strata Authors.
//
// The file:// backend: objects are files below a root directory, a key's
// '/'-separated components its subdirectories.
//
// Put and PutFile follow the commit protocol (util/file_util.h): the bytes go
// to "<dir>/.strata-tmp-<pid>-<n>", are fsynced, renamed to the key's name,
// and the directory is fsynced (new parent directories too). List skips
// temporary names, which no valid key can have. Every path below the root is
// walked one component at a time with O_NOFOLLOW, so a symbolic link inside
// the root is never followed: it is neither listed nor read through, and no
// key reaches outside the root. The root itself may be a symbolic link (e.g.
// to a mount point); it is resolved once, when the store is opened.
//
// Copies use copy_file_range, then sendfile, then 8 MiB read/write, whichever
// the two file systems support. StoreOptions are not used (no retries: local
// errors are not transient).
//
// Delete removes directories it leaves empty, up to the root. Within one
// process a Delete never races a Put into the same directory; two processes
// writing one directory tree (e.g. over NFS) may see a Put fail with
// NOT_FOUND when a concurrent Delete removed its directory (retry it).
#ifndef STRATA_STORAGE_FILE_STORE_H_
#define STRATA_STORAGE_FILE_STORE_H_

#include <memory>
#include <string>

#include "storage/object_store.h"

namespace strata::storage {

// Opens (creating it if missing) the directory `root`, an absolute path, as
// the store named `url`.
StatusOr<std::unique_ptr<ObjectStore>> OpenFileStore(const std::string& url,
                                                     const std::string& root,
                                                     const StoreOptions& options);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_FILE_STORE_H_
