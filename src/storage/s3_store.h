// Copyright 2026 The Strata Authors.
//
// The s3:// backend. Objects are "<prefix>/<key>" in the bucket.
//
//   Put            PutObject
//   PutFile        PutObject up to StoreOptions::part_bytes; larger files as
//                  a multipart upload, `parallelism` parts in flight (one
//                  thread each), aborted if any part finally fails
//   Get            GetObject
//   GetFile        GetObject of the first part_bytes (which tells the size),
//                  then the rest as ranged GETs, `parallelism` in flight,
//                  pwritten into the file, each pinned to the first
//                  response's ETag (If-Match: ABORTED if the object changes)
//   List           ListObjectsV2, page after page (list_page_size keys each)
//   Delete         DeleteObject
//   CheckAccess    ListObjectsV2, then PutObject and DeleteObject of a probe
//
// Integrity: every PutObject and UploadPart carries x-amz-checksum-crc32c of
// its body (S3 refuses a body corrupted in transit with BadDigest, which is
// retried); a multipart upload is created with x-amz-checksum-algorithm
// CRC32C and completed with the parts' checksums. Downloads must deliver
// exactly Content-Length bytes (DATA_LOSS otherwise).
//
// Credentials are static (options or AWS_* variables); instance profiles,
// SSO and credential files are not read.
#ifndef STRATA_STORAGE_S3_STORE_H_
#define STRATA_STORAGE_S3_STORE_H_

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "storage/object_store.h"
#include "storage/s3_client.h"

namespace strata::storage {

// Opens the store `url` = s3://<bucket>[/<prefix>]. Fills empty options from
// the environment (see StoreOptions). Does not contact the server.
// FAILED_PRECONDITION when no credentials are set.
StatusOr<std::unique_ptr<ObjectStore>> OpenS3Store(const std::string& url,
                                                   const std::string& bucket,
                                                   const std::string& prefix,
                                                   const StoreOptions& options);

// One ListObjectsV2 page: appends each listed key that starts with `full`
// and is longer than `strip` (the bucket prefix and its '/') to `out`, with
// those `strip` bytes removed; sets the continuation token and whether the
// listing goes on. UNAVAILABLE when `body` is not a ListBucketResult.
Status ParseListPage(std::string_view body, const std::string& full, size_t strip,
                     std::vector<ObjectInfo>* out, std::string* token, bool* truncated);

class S3Store : public ObjectStore {
 public:
  explicit S3Store(S3Config config) : client_(std::move(config)) {}

  const std::string& url() const override { return client_.config().url; }
  Status Put(const std::string& key, std::string_view data) override;
  Status PutFile(const std::string& key, const std::string& path) override;
  StatusOr<std::string> Get(const std::string& key) override;
  StatusOr<uint64_t> GetFile(const std::string& key, const std::string& path) override;
  StatusOr<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::string& key) override;
  Status CheckAccess() override;

  // Requests retried so far, over the store's lifetime.
  uint64_t retries() const { return client_.retries(); }
  // The S3 endpoint requests go to, e.g. "http://127.0.0.1:9000".
  const std::string& endpoint() const { return client_.config().endpoint; }

 private:
  S3Op Op(std::string_view name, std::string_view key, std::string_view detail = {}) const;
  // PutObject of `body` with its CRC32C.
  Status PutObject(std::string_view op_name, const std::string& key, const S3Body& body);
  // PutFile of a file larger than a part.
  Status PutMultipart(const std::string& key, int fd, uint64_t size);
  StatusOr<std::string> CreateMultipart(const std::string& key);
  Status CompleteMultipart(const std::string& key, const std::string& upload_id,
                           const std::vector<std::string>& etags,
                           const std::vector<std::string>& crcs);
  void AbortMultipart(const std::string& key, const std::string& upload_id);
  // GetFile's ranged GETs of bytes [from, size) into `fd`.
  Status GetRanges(const std::string& key, int fd, uint64_t from, uint64_t size,
                   const std::string& etag);

  S3Client client_;
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_S3_STORE_H_
