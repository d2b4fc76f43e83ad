// Copyright 2026 The Strata Authors.
//
// What the backup tier reads back from object storage and the operator's
// command line: a part's metadata, a commit record, backup ids and times
// parsed from listed keys, retention durations, and agent endpoints. Each
// parser gets the whole input; none may throw or crash.
#include <cstdint>
#include <string_view>

#include "backup/layout.h"
#include "backup/retention.h"
#include "net/endpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  strata::backup::DecodePartMeta(text, "fuzz").status().IgnoreError();
  strata::backup::DecodeCommit(text, "fuzz").status().IgnoreError();
  strata::backup::ParseBackupId(text).status().IgnoreError();
  strata::backup::ParseUtcTime(text).status().IgnoreError();
  strata::backup::ParseRetentionDuration(text).status().IgnoreError();
  strata::net::ParseEndpoint(text).status().IgnoreError();
  return 0;
}
