// Copyright 2026 The Strata Authors.
//
// S3Client: one S3 request over libcurl, signed with SigV4 (sigv4.h), sent
// with retries (exponential backoff, full jitter) on transient failures.
// The S3 operations themselves (objects, multipart uploads, listings) are in
// s3_store.cc.
//
// Transient: connection failures, resets, timeouts and stalls (no progress at
// 1 KiB/s for StoreOptions::stall_timeout), 5xx, 429, SlowDown,
// RequestTimeout, InternalError, BadDigest. Everything else is returned at
// once. Each retry is logged at warn level.
//
// Connections are reused: finished easy handles go back to a pool (curl
// keeps each handle's connection open), so a store has at most as many
// connections as requests it ever had in flight at once.
//
// STRATA_CURL_VERBOSE=1 in the environment prints libcurl's trace of every
// request (headers included, secrets not) to stderr.
//
// Thread-safe.
#ifndef STRATA_STORAGE_S3_CLIENT_H_
#define STRATA_STORAGE_S3_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "storage/object_store.h"
#include "storage/rate_limiter.h"
#include "storage/s3_errors.h"
#include "storage/sigv4.h"
#include "util/mutex.h"

namespace strata::storage {

// Where a store's requests go and as whom.
struct S3Config {
  std::string url;  // "s3://bucket/prefix", for messages
  std::string bucket;
  std::string prefix;  // "" or "a/b" (no trailing '/')
  // "http://host:port" (path-style requests) or "" for AWS (virtual-host
  // style, path-style for bucket names with dots).
  std::string endpoint;
  std::string region;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // may be empty
  StoreOptions options;
};

// A request body: `size` bytes of `data`, or of file `fd` from `offset`.
struct S3Body {
  std::string_view data;
  int fd = -1;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct S3Request {
  S3Op op;                     // names the request in messages and logs
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string object_key;      // the full key below the bucket; "" = the bucket
  // Query parameters, unencoded; sent sorted by name as SigV4 requires.
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::string> headers;  // "Name: value"
  const S3Body* body = nullptr;      // PUT and POST; null = empty
  // GET of bytes [range->first, range->second] (inclusive).
  std::optional<std::pair<uint64_t, uint64_t>> range;
  // A successful GET's bytes go to this file at sink_offset instead of
  // S3Response::body. A retried ranged GET resumes where it stopped.
  int sink_fd = -1;
  uint64_t sink_offset = 0;
  // Set by another thread to abandon the request (returns CANCELLED).
  const std::atomic<bool>* cancel = nullptr;
};

struct S3Response {
  long status = 0;
  std::string body;                            // unless written to sink_fd
  std::map<std::string, std::string> headers;  // names in lower case
  uint64_t sink_bytes = 0;                     // bytes written to sink_fd
};

class S3Client {
 public:
  explicit S3Client(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Config& config() const { return config_; }
  // "prefix/rel", or rel when the store has no prefix.
  std::string FullKey(std::string_view rel) const;

  // Sends `req` until it succeeds (2xx), fails permanently, or has been tried
  // options.max_attempts times. A 2xx response whose body is shorter or
  // longer than its Content-Length is DATA_LOSS.
  StatusOr<S3Response> Call(const S3Request& req);

  // Retries so far (all requests), for tests and `strata status`.
  uint64_t retries() const { return retries_.load(); }
  // Requests sent so far, every try of every call counted, for tests.
  uint64_t requests() const { return requests_.load(); }

 private:
  struct Attempt;
  struct Handle;
  // One try; `done` bytes of a ranged sink GET are already in the file.
  Attempt Once(const S3Request& req, uint64_t done);
  std::string Url(const S3Request& req) const;
  // Every header of one try of `req` ("Name: value"), signed; `done` bytes
  // of a ranged GET are already in its file.
  std::vector<std::string> SignedHeaders(const S3Request& req, uint64_t done) const;
  // The request's path as sent: "/bucket/key" or "/key", RFC 3986-encoded.
  std::string EncodedPath(const S3Request& req) const;
  // What SigV4 signs for `req` sent with `headers` ("Name: value").
  SigV4Request ToSign(const S3Request& req, const std::vector<std::string>& headers) const;
  std::unique_ptr<Handle> AcquireHandle();
  void ReleaseHandle(std::unique_ptr<Handle> h);

  const S3Config config_;
  const std::string host_url_;   // scheme://host[:port][/bucket] for requests
  const std::string host_;       // host[:port]: the Host header
  const std::string base_path_;  // "/bucket" (path style) or ""
  const SigV4Credentials credentials_;
  std::unique_ptr<RateLimiter> upload_limiter_;  // null: unlimited
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> requests_{0};
  Mutex pool_mu_;
  std::vector<std::unique_ptr<Handle>> pool_ GUARDED_BY(pool_mu_);
};

}  // namespace strata::storage

#endif  // STRATA_STORAGE_S3_CLIENT_H_
