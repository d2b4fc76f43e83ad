// Copyright 2026 The Strata Authors.
//
// AWS Signature Version 4 for S3 requests, computed here rather than by
// libcurl: libcurl 7.88 (Debian 12) signs the query string exactly as it
// appears in the URL, without sorting or normalising it, and cannot be told
// how the server will canonicalise the request.
//
// Servers disagree on one point. AWS and GCS (and MinIO, Ceph) rebuild the
// canonical request from the decoded URL and percent-encode it again as the
// specification says (RFC 3986, '/' kept in the path, "%2F" in the query).
// moto (werkzeug) canonicalises the URL in its "IRI" form instead: every
// escape but spaces, controls, '%' and a few delimiters is decoded, so a
// listing with prefix "job/" is checked over "prefix=job/" and a key
// "a=b" over "/bucket/a=b". No single signature satisfies both, so the client
// signs as AWS specifies and, when a server answers SignatureDoesNotMatch to
// a request whose canonical form differs between the two, signs once more as
// the server evidently expects (see S3Client::Call).
#ifndef STRATA_STORAGE_SIGV4_H_
#define STRATA_STORAGE_SIGV4_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::storage {

// How the server canonicalises the URL it received.
enum class SigV4Dialect {
  kAws,         // the specification: RFC 3986 escapes for all but A-Z a-z 0-9 - _ . ~
  kDecodedUrl,  // moto: escapes decoded except controls, space, '%' and delimiters
};

const char* SigV4DialectName(SigV4Dialect d);

// RFC 3986 percent-encoding as SigV4 wants it: everything but A-Z a-z 0-9
// - _ . ~ (and '/' when `keep_slash`) becomes %XX with upper-case hex.
std::string UriEncode(std::string_view s, bool keep_slash);

// The canonical URI of a path sent as UriEncode(path, /*keep_slash=*/true).
std::string CanonicalUri(std::string_view encoded_path, SigV4Dialect d);

// The canonical query string of unencoded (name, value) pairs: encoded,
// sorted by name then value, "name=value" joined by '&' ("name=" for an empty
// value). The URL must carry the query as UriEncode(name)=UriEncode(value).
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query,
                           SigV4Dialect d);

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
  std::string canonical_uri;
  std::string canonical_query;
  std::map<std::string, std::string> headers;
  std::string_view payload_hash;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

// What a response to a re-signed request says of its signature: accepted
// (2xx, 3xx, or a 4xx that comes after authentication: 404, 409, 412, 416,
// ...), refused (400, 401, 403), or nothing (5xx, 429: the server did not
// get as far).
enum class Verdict { kAccepted, kRefused, kUnknown };
Verdict SignatureVerdict(long http_status);

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
