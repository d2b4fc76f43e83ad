// Copyright 2026 The Strata Authors.
//
// A step's manifest as read from a RAM disk, a peer or a backup: decoding
// arbitrary bytes must fail cleanly, and a manifest that decodes must encode
// to bytes that decode to the same manifest.
//
// Structure-aware: an input that does not start with the manifest's magic
// is taken as a body and given a valid 32-byte header (its size and XXH3),
// so mutations reach the body's parser instead of failing the checksum; an
// input with the magic is decoded as it is (the header's own checks).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "format/manifest.h"
#include "util/hash.h"

namespace {

void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string framed;
  if (!bytes.starts_with("STRATAMF")) {
    framed = "STRATAMF";
    PutLE(&framed, 1, 4);  // format version
    PutLE(&framed, 0, 4);  // flags
    PutLE(&framed, size, 8);
    PutLE(&framed, strata::Xxh3(data, size), 8);
    framed.append(bytes);
    bytes = framed;
  }
  auto info = strata::DecodeManifest(bytes, "fuzz");
  if (!info.ok()) return 0;
  const std::string encoded = strata::EncodeManifest(*info);
  auto again = strata::DecodeManifest(encoded, "fuzz re-encoded");
  if (!again.ok() || strata::EncodeManifest(*again) != encoded) {
    std::fprintf(stderr, "manifest does not survive encode -> decode: %s\n",
                 again.ok() ? "bytes changed" : again.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
