// Copyright 2026 The Strata Authors.
//
// What the manifest codec's tests share (tests/format/manifest_test.cc,
// manifest_body_test.cc): a sample step, a header built independently of
// EncodeManifest, and checks of a decoded step and of DATA_LOSS errors.
#ifndef STRATA_TESTS_HARNESS_MANIFEST_TEST_UTIL_H_
#define STRATA_TESTS_HARNESS_MANIFEST_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "format/manifest.h"
#include "test_util.h"
#include "util/hash.h"

namespace strata::manifest_test {

using json = nlohmann::json;

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
inline constexpr uint64_t kUInt64Max = std::numeric_limits<uint64_t>::max();
inline constexpr std::string_view kSource = "/ckpt/1200/strata.manifest";

using testing::ExpectError;

// A DATA_LOSS error from DecodeManifest(…, kSource), prefixed with the source.
inline void ExpectDataLoss(const Status& s, std::string_view want) {
  ExpectError(s, StatusCode::kDataLoss, want);
  EXPECT_TRUE(s.message().starts_with(kSource)) << s.message();
}

// 2 files; a float32 matrix, an int64 scalar and an empty bfloat16 tensor.
inline StepInfo SampleStep() {
  StepInfo info;
  info.step = 1200;
  info.format_version = kFormatVersion;
  info.created_unix_ms = 1767225600123;
  info.chunk_size = 4096;
  info.files = {{"data-00000.bin", 24576}, {"data-00001.bin", 8}};
  info.items = {
      {"model.dense.kernel", DType::kFloat32, {3, 2048}, 24576, 0, 0, {}},
      {"optimizer.θ.step", DType::kInt64, {}, 8, 1, 0, {}},
      {"empty", DType::kBFloat16, {0, 16}, 0, 1, 8, {}},
  };
  uint64_t c = 0x0123456789abcdefull;
  for (ItemInfo& it : info.items) {
    for (uint64_t k = 0; k < ChunkCount(it.nbytes, info.chunk_size); ++k) {
      it.chunk_xxh3.push_back(c);
      c = c * 6364136223846793005ull + 1442695040888963407ull;
    }
  }
  info.items[0].chunk_xxh3[0] = 0;  // extremes of the hex encoding
  info.items[0].chunk_xxh3[1] = kUInt64Max;
  return info;
}

inline void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// A manifest around `body`, built independently of EncodeManifest: 32-byte
// header with a correct body size and checksum unless overridden.
inline std::string WithHeader(std::string_view body, uint32_t version = 1, uint32_t flags = 0,
                              std::optional<uint64_t> body_size = std::nullopt) {
  std::string out = "STRATAMF";
  PutLE(&out, version, 4);
  PutLE(&out, flags, 4);
  PutLE(&out, body_size.value_or(body.size()), 8);
  PutLE(&out, Xxh3(body.data(), body.size()), 8);
  out += body;
  return out;
}

inline std::string ValidManifest() {
  std::string bytes = EncodeManifest(SampleStep());
  testing::SaveFuzzSeed("manifest", bytes);
  return bytes;
}
inline std::string BodyOf(const std::string& manifest) {
  return manifest.substr(kManifestHeaderSize);
}
inline json ValidBodyJson() { return json::parse(BodyOf(ValidManifest())); }

inline void ExpectSameStep(const StepInfo& got, const StepInfo& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.format_version, want.format_version);
  EXPECT_EQ(got.created_unix_ms, want.created_unix_ms);
  EXPECT_EQ(got.chunk_size, want.chunk_size);
  ASSERT_EQ(got.files.size(), want.files.size());
  for (size_t i = 0; i < want.files.size(); ++i) {
    SCOPED_TRACE("files[" + std::to_string(i) + "]");
    EXPECT_EQ(got.files[i].name, want.files[i].name);
    EXPECT_EQ(got.files[i].size, want.files[i].size);
  }
  ASSERT_EQ(got.items.size(), want.items.size());
  for (size_t i = 0; i < want.items.size(); ++i) {
    SCOPED_TRACE("items[" + std::to_string(i) + "]");
    const ItemInfo& g = got.items[i];
    const ItemInfo& w = want.items[i];
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.dtype, w.dtype);
    EXPECT_EQ(g.shape, w.shape);
    EXPECT_EQ(g.nbytes, w.nbytes);
    EXPECT_EQ(g.file, w.file);
    EXPECT_EQ(g.offset, w.offset);
    EXPECT_EQ(g.chunk_xxh3, w.chunk_xxh3);
  }
}

}  // namespace strata::manifest_test

#endif  // STRATA_TESTS_HARNESS_MANIFEST_TEST_UTIL_H_
