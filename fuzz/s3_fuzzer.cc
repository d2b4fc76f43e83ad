// Copyright 2026 The Strata Authors.
//
// S3's XML answers as the backup tier reads them: an error body (any
// status, any body, not always XML) and a ListObjectsV2 page. Neither
// parser may crash; a listing never yields a key outside the prefix asked.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "storage/s3_errors.h"
#include "storage/s3_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const strata::storage::S3ErrorBody error = strata::storage::ParseS3Error(body);
  (void)error;
  std::vector<strata::storage::ObjectInfo> objects;
  std::string token;
  bool truncated = false;
  const std::string full = "prefix/job";
  if (strata::storage::ParseListPage(body, full, 7, &objects, &token, &truncated).ok()) {
    for (const auto& o : objects) {
      if (("prefix/" + o.key).compare(0, full.size(), full) != 0) {
        std::fprintf(stderr, "listed key %s is outside %s\n", o.key.c_str(), full.c_str());
        std::abort();
      }
    }
  }
  return 0;
}
