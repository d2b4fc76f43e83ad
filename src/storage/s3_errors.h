// Copyright 2026 The Strata Authors.
//
// S3 error responses -> one readable line with the right status code.
//
//   s3://ckpt/job: PutObject a/b refused: AccessDenied (the credentials lack
//       s3:PutObject on bucket "ckpt")
//   s3://ckpt/job: GetObject a/b: bucket "ckpt" does not exist (NoSuchBucket)
//
// The raw XML never reaches a message: only its Code, a trimmed Message and,
// for clock skew, the two times.
#ifndef STRATA_STORAGE_S3_ERRORS_H_
#define STRATA_STORAGE_S3_ERRORS_H_

#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::storage {

// The fields of an S3 <Error> document that messages use.
struct S3ErrorBody {
  std::string code;          // "NoSuchBucket"; empty if the body was no <Error>
  std::string message;       // one line, at most 200 characters
  std::string server_time;   // RequestTimeTooSkewed: ISO 8601 times
  std::string request_time;  //
};

// Parses `body` (may be empty or not XML: HEAD responses have no body).
S3ErrorBody ParseS3Error(std::string_view body);

// Which request failed, for messages.
struct S3Op {
  std::string_view url;  // "s3://bucket/prefix"
  std::string_view bucket;
  std::string_view name;    // S3 operation: "PutObject", "UploadPart", ...
  std::string_view key;     // relative to the prefix; "" for bucket operations
  std::string_view detail;  // e.g. "part 3 of 7"; may be empty
};

// "<url>: <name> <key> (<detail>)": the prefix of every message about `op`.
std::string DescribeOp(const S3Op& op);

// The IAM action `op_name` needs ("s3:PutObject" for UploadPart, ...).
std::string_view PermissionFor(std::string_view op_name);

// True if a response with this HTTP status and S3 code may succeed when
// retried: 5xx, 429, SlowDown, RequestTimeout, InternalError, and a body the
// server found corrupted in transit (BadDigest).
bool IsRetryableS3Error(long http_status, std::string_view code);

// The status for a refused request (see the file comment for the shapes).
Status S3ErrorStatus(const S3Op& op, long http_status, const S3ErrorBody& error);

}  // namespace strata::storage

#endif  // STRATA_STORAGE_S3_ERRORS_H_
