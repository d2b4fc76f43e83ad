// Copyright 2026 The Strata Authors.
//
// ObjectStore: the durable backup tier behind one URL.
//
//   s3://bucket/prefix   the S3 API over libcurl (AWS SigV4 signing by
//                        libcurl), path-style requests against an explicit
//                        endpoint (MinIO, moto, Ceph RGW, GCS's XML API) or
//                        virtual-host requests against AWS.
//   file:///abs/path     a directory: a local disk, NFS, a FUSE-mounted bucket.
//
// Keys are '/'-separated relative names below the URL's prefix (see
// ValidateObjectKey); the store never reads or writes outside that prefix.
//
// Contracts every backend keeps:
//   * Put and PutFile are atomic per object: a reader sees the previous
//     object (or none) or the complete new one, never a part.
//   * Get and GetFile return exactly the stored bytes or an error.
//   * Transient failures (5xx, throttling, resets, timeouts) are retried with
//     exponential backoff and full jitter, at most StoreOptions::max_attempts
//     times per request; permanent ones are not.
//   * Every error is one readable line naming the URL (bucket), the key, the
//     operation and, for a refusal, the permission that was refused, e.g.
//       s3://ckpt/job: PutObject 2026-11-21_04-30/r0.part refused: AccessDenied
//       (the credentials lack s3:PutObject on bucket "ckpt")
//     Codes: NOT_FOUND (no such key or bucket), PERMISSION_DENIED (refused,
//     bad credentials, clock skew), UNAVAILABLE (unreachable after retries),
//     INVALID_ARGUMENT (bad URL or key), DATA_LOSS (size/checksum mismatch).
// All methods are thread-safe; one store may be shared by many threads.
#ifndef STRATA_STORAGE_OBJECT_STORE_H_
#define STRATA_STORAGE_OBJECT_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/status.h"

namespace strata::storage {

struct ObjectInfo {
  std::string key;  // relative to the store's prefix
  uint64_t size = 0;
};

struct StoreOptions {
  // S3 endpoint, e.g. "http://127.0.0.1:9000". Empty: AWS_ENDPOINT_URL_S3,
  // then AWS_ENDPOINT_URL, then AWS (https://s3.<region>.amazonaws.com).
  // An explicit endpoint uses path-style addressing.
  std::string endpoint;
  // Empty: AWS_REGION, then AWS_DEFAULT_REGION, then "us-east-1".
  std::string region;
  // Credentials; empty: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
  // AWS_SESSION_TOKEN.
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  // Requests (parts, ranges, files) in flight for one PutFile/GetFile.
  int parallelism = 8;
  // Objects larger than this are uploaded in parts of this size (S3: at
  // least 5 MiB) and downloaded in ranges of this size.
  uint64_t part_bytes = uint64_t{16} << 20;
  // Upper bound on upload throughput across the whole store, bytes/second;
  // 0 = unlimited. Downloads are not limited (restore must be fast).
  uint64_t upload_bytes_per_second = 0;
  // Attempts per request, the first included (>= 1).
  int max_attempts = 6;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10000};
  // Connection set-up limit, and a request is abandoned (and retried) when it
  // moves fewer than 1 KiB/s for this long.
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds stall_timeout{30000};
  // Keys asked for per List request (S3 max-keys; S3 caps it at 1000).
  // Smaller values only make List slower; tests use them to page.
  int list_page_size = 1000;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // The URL the store was opened with, e.g. "s3://bucket/prefix" (for
  // messages and `strata status`).
  virtual const std::string& url() const = 0;

  // Stores `data` as `key`, replacing any object of that name.
  virtual Status Put(const std::string& key, std::string_view data) = 0;
  // Stores the whole file `path` as `key`; multipart/parallel when large.
  virtual Status PutFile(const std::string& key, const std::string& path) = 0;

  // The whole object.
  virtual StatusOr<std::string> Get(const std::string& key) = 0;
  // Writes the object into `path` (created or truncated; its directory must
  // exist), with parallel ranged reads when large; returns its size. On
  // error `path` may hold partial data: the caller discards it.
  virtual StatusOr<uint64_t> GetFile(const std::string& key, const std::string& path) = 0;

  // Every object whose key starts with `prefix` ("" = all), sorted by key.
  virtual StatusOr<std::vector<ObjectInfo>> List(const std::string& prefix) = 0;
  // Removes `key`; OK when it did not exist.
  virtual Status Delete(const std::string& key) = 0;

  // Proves the store is usable: the bucket/directory exists and objects can
  // be listed, written and removed (a small probe object under
  // ".strata-probe/"). The error says which of these failed and why.
  virtual Status CheckAccess() = 0;
};

// OK iff `key` is a safe relative object name: 1..1024 bytes, no leading or
// trailing '/', no empty, "." or ".." component, no NUL or control bytes, no
// component beginning with kReservedTempPrefix.
Status ValidateObjectKey(std::string_view key);

// Names beginning with this are the file:// backend's files in the making;
// no key has such a component, and List never returns one.
inline constexpr std::string_view kReservedTempPrefix = ".strata-tmp-";

// `key` in double quotes with control bytes, '"' and '\\' escaped as \xNN:
// safe to put in a one-line message.
std::string QuoteKey(std::string_view key);

// Opens the store behind `url` (s3://bucket[/prefix] or file:///abs/path).
// Does not contact the server; CheckAccess does. A file:// directory is
// created if missing.
StatusOr<std::unique_ptr<ObjectStore>> OpenObjectStore(const std::string& url,
                                                       const StoreOptions& options = {});

}  // namespace strata::storage

#endif  // STRATA_STORAGE_OBJECT_STORE_H_
