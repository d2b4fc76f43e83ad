// Copyright 2026 The Strata Authors.
//
// AWS Signature Version 4 for S3 requests, computed here rather than by
// libcurl: libcurl 7.88 (Debian 12) signs the query string exactly as it
// appears in the URL, without sorting or normalising it, and cannot be told
// how the server will canonicalise the request.
//
// One canonical form, the specification's: the path and the query are sent
// exactly as they are signed (RFC 3986 escapes for all but A-Z a-z 0-9 - _ .
// ~, '/' kept in the path, "%2F" in the query, the query sorted), so a server
// that canonicalises what it received (AWS, GCS, MinIO, Ceph) and one that
// signs the request line as it arrived (moto 5.2: botocore over the raw path
// and query) compute the same request. A refused signature is an error, never
// a reason to sign another way and send again.
#ifndef STRATA_STORAGE_SIGV4_H_
#define STRATA_STORAGE_SIGV4_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::storage {

// RFC 3986 percent-encoding as SigV4 wants it: everything but A-Z a-z 0-9
// - _ . ~ (and '/' when `keep_slash`) becomes %XX with upper-case hex.
std::string UriEncode(std::string_view s, bool keep_slash);

// The canonical query string of unencoded (name, value) pairs: encoded,
// sorted by name then value, "name=value" joined by '&' ("name=" for an empty
// value). The URL must carry the query as UriEncode(name)=UriEncode(value).
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

struct SigV4Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string region;          // "us-east-1"
  std::string service = "s3";  // "s3", "iam", ...
};

// What to sign. `headers` maps lower-case names to values exactly as sent;
// it must hold "host" and "x-amz-date" (YYYYMMDD'T'HHMMSS'Z'), and every
// header it holds is signed.
struct SigV4Request {
  std::string_view method;
  std::string canonical_uri;  // the path as sent: UriEncode(path, /*keep_slash=*/true)
  std::string canonical_query;
  std::map<std::string, std::string> headers;
  std::string_view payload_hash;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

// The canonical request, newline-separated as the specification gives it.
std::string CanonicalRequest(const SigV4Request& r);

// The value of the Authorization header for `r`.
std::string SigV4Authorization(const SigV4Credentials& c, const SigV4Request& r);

// "YYYYMMDDTHHMMSSZ" for the current UTC time.
std::string AmzDateNow();

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_SIGV4_H_
