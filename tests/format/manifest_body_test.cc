// Copyright 2026 The Strata Authors.
//
// DecodeManifest against hostile bodies under a valid header: each field's
// checks and their messages, and the body read as a stream of parser
// events (fields in any order, given twice, unknown; many bad entries).
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "format/manifest.h"
#include "manifest_test_util.h"

namespace strata {
// A namespace of its own, not an anonymous one: in a unity build this file
// shares a compiler run with other tests that define the same helper names.
namespace manifest_body_test {

using json = nlohmann::json;
using namespace manifest_test;  // NOLINT: the shared helpers

// ---------------------------------------------------------------------------
// Hostile manifests: well-framed bodies with bad contents. Each case mutates
// the JSON of SampleStep(); items[0] is the float32 [3, 2048] tensor (6
// chunks, all of file 0), items[1] the int64 scalar, items[2] the empty one.

struct BodyCase {
  const char* name;
  void (*mutate)(json& body);
  const char* want;  // part of the DATA_LOSS message
};

void PrintTo(const BodyCase& c, std::ostream* os) { *os << c.name; }

constexpr uint64_t k2Pow40 = uint64_t{1} << 40;
constexpr uint64_t k2Pow62 = uint64_t{1} << 62;

json& Item0(json& b) { return b["items"][0]; }

const BodyCase kBodyCases[] = {
    // Top-level fields.
    {"MissingItems", [](json& b) { b.erase("items"); }, "missing field \"items\""},
    {"ItemsNotArray", [](json& b) { b["items"] = json::object(); },
     "field \"items\" is not an array"},
    {"MissingFiles", [](json& b) { b.erase("files"); }, "missing field \"files\""},
    {"MissingFormat", [](json& b) { b.erase("format"); }, "missing field \"format\""},
    {"WrongFormat", [](json& b) { b["format"] = "zip"; },
     "field \"format\" is not \"strata-checkpoint\""},
    {"MissingCreated", [](json& b) { b.erase("created_unix_ms"); },
     "missing field \"created_unix_ms\""},
    {"StepNegative", [](json& b) { b["step"] = -1; }, "field \"step\" = -1 is outside"},
    {"StepString", [](json& b) { b["step"] = "1200"; }, "field \"step\" is not an integer"},
    {"StepFloat", [](json& b) { b["step"] = 1200.5; }, "field \"step\" is not an integer"},
    {"StepAboveInt64", [](json& b) { b["step"] = kUInt64Max; }, "field \"step\" is out of range"},
    {"ChunkSizeNotPowerOfTwo", [](json& b) { b["chunk_size"] = 6144; },
     "field \"chunk_size\" is not a power of two"},
    {"ChunkSizeOne", [](json& b) { b["chunk_size"] = 1; }, "field \"chunk_size\" = 1 is outside"},
    {"ChunkSizeZero", [](json& b) { b["chunk_size"] = 0; }, "field \"chunk_size\" = 0 is outside"},
    {"ChunkSize2Pow40", [](json& b) { b["chunk_size"] = k2Pow40; },
     "field \"chunk_size\" = 1099511627776 is outside"},
    // Files.
    {"FilesNotArray", [](json& b) { b["files"] = "data-00000.bin"; },
     "field \"files\" is not an array"},
    {"FileNotObject", [](json& b) { b["files"][0] = "data-00000.bin"; },
     "files[0] is not an object"},
    {"FileNameWrongIndex", [](json& b) { b["files"][0]["name"] = "data-00001.bin"; },
     "files[0]: field \"name\" is not \"data-00000.bin\""},
    {"FileNameTraversal", [](json& b) { b["files"][1]["name"] = "../data-00001.bin"; },
     "files[1]: field \"name\" is not \"data-00001.bin\""},
    {"FileSizeNegative", [](json& b) { b["files"][0]["size"] = -1; },
     "files[0]: field \"size\" = -1 is outside"},
    {"FileSizeMissing", [](json& b) { b["files"][1].erase("size"); },
     "files[1]: missing field \"size\""},
    // Item names.
    {"ItemNotObject", [](json& b) { Item0(b) = 1; }, "items[0] is not an object"},
    {"ItemNameNotString", [](json& b) { Item0(b)["name"] = 5; },
     "items[0]: field \"name\" is not a string"},
    {"ItemNameEmpty", [](json& b) { Item0(b)["name"] = ""; }, "items[0]: item name is empty"},
    {"ItemNameSlash", [](json& b) { Item0(b)["name"] = "a/b"; },
     "items[0]: item name \"a/b\" contains '/'"},
    {"ItemNameDotDot", [](json& b) { Item0(b)["name"] = ".."; },
     "items[0]: item name \"..\" contains \"..\""},
    {"ItemNameTraversal", [](json& b) { Item0(b)["name"] = "../../etc/passwd"; },
     "item name \"../../etc/passwd\" contains '/'"},
    {"ItemNameNul", [](json& b) { Item0(b)["name"] = std::string("a\0b", 3); },
     "contains a NUL byte"},
    {"ItemNameTooLong", [](json& b) { Item0(b)["name"] = std::string(1025, 'n'); },
     "is longer than 1024 bytes"},
    {"DuplicateItemNames", [](json& b) { b["items"][1]["name"] = "model.dense.kernel"; },
     "items[1]: duplicate item name \"model.dense.kernel\""},
    // Dtypes and shapes.
    {"UnknownDtype", [](json& b) { Item0(b)["dtype"] = "float128"; },
     "field \"dtype\" \"float128\" is not a known dtype"},
    {"DtypeNotString", [](json& b) { Item0(b)["dtype"] = 11; }, "field \"dtype\" is not a string"},
    {"ShapeNegativeDim",
     [](json& b) {
       Item0(b)["shape"] = {-3, 2048};
     },
     "field \"shape\" has a dimension that is not a non-negative 64-bit integer"},
    {"ShapeFloatDim",
     [](json& b) {
       Item0(b)["shape"] = {3.0, 2048};
     },
     "field \"shape\" has a dimension that is not"},
    {"ShapeDimAboveInt64", [](json& b) { Item0(b)["shape"] = json::array({kUInt64Max}); },
     "field \"shape\" has a dimension that is not"},
    {"Shape65Dims", [](json& b) { Item0(b)["shape"] = std::vector<int>(65, 1); },
     "field \"shape\" has more than 64 dimensions"},
    {"ShapeNotArray", [](json& b) { Item0(b)["shape"] = 6144; }, "field \"shape\" is not an array"},
    {"ShapeProductOverflows",
     [](json& b) {
       Item0(b)["shape"] = {k2Pow40, k2Pow40};
     },
     "field \"nbytes\" does not match dtype float32 and shape [1099511627776, 1099511627776]"},
    // Sizes, files and offsets.
    {"NbytesMismatch", [](json& b) { Item0(b)["nbytes"] = 24572; },
     "field \"nbytes\" does not match dtype float32 and shape [3, 2048]"},
    {"NbytesNegative", [](json& b) { Item0(b)["nbytes"] = -1; },
     "field \"nbytes\" = -1 is outside"},
    {"HugeNbytesPastFile",
     [](json& b) {
       Item0(b)["dtype"] = "uint8";
       Item0(b)["shape"] = json::array({k2Pow62});
       Item0(b)["nbytes"] = k2Pow62;
     },
     "field \"offset\" + nbytes runs past the end of data-00000.bin"},
    {"HugeNbytesInHugeFile",  // must not try to allocate 2^50 checksums
     [](json& b) {
       b["files"][0]["size"] = k2Pow62;
       Item0(b)["dtype"] = "uint8";
       Item0(b)["shape"] = json::array({k2Pow62});
       Item0(b)["nbytes"] = k2Pow62;
     },
     "field \"chunks\" has 6 entries, expected 1125899906842624"},
    {"FileIndexOutOfRange", [](json& b) { Item0(b)["file"] = 2; },
     "field \"file\" = 2 names no file"},
    {"FileIndexNegative", [](json& b) { Item0(b)["file"] = -1; }, "field \"file\" = -1 is outside"},
    {"FileIndex2Pow32", [](json& b) { Item0(b)["file"] = uint64_t{1} << 32; },
     "field \"file\" = 4294967296 is outside"},
    {"OffsetPastFileEnd", [](json& b) { Item0(b)["offset"] = 4; },
     "field \"offset\" + nbytes runs past the end of data-00000.bin"},
    {"ScalarPastFileEnd", [](json& b) { b["items"][1]["offset"] = 1; },
     "items[1]: field \"offset\" + nbytes runs past the end of data-00001.bin"},
    {"OffsetInt64Max", [](json& b) { Item0(b)["offset"] = kInt64Max; },
     "field \"offset\" + nbytes runs past the end"},
    {"OffsetUInt64Max", [](json& b) { Item0(b)["offset"] = kUInt64Max; },
     "field \"offset\" is out of range"},
    {"OffsetUInt64MaxMinusNbytes", [](json& b) { Item0(b)["offset"] = kUInt64Max - 24575; },
     "field \"offset\" is out of range"},
    {"OffsetNegative", [](json& b) { Item0(b)["offset"] = -24576; },
     "field \"offset\" = -24576 is outside"},
    // Chunks.
    {"ChunksMissing", [](json& b) { Item0(b).erase("chunks"); }, "missing field \"chunks\""},
    {"ChunksOneShort", [](json& b) { Item0(b)["chunks"].erase(5); },
     "field \"chunks\" has 5 entries, expected 6"},
    {"ChunksOneExtra", [](json& b) { Item0(b)["chunks"].push_back("0000000000000000"); },
     "field \"chunks\" has 7 entries, expected 6"},
    {"ChunksOnEmptyItem",
     [](json& b) { b["items"][2]["chunks"] = json::array({"0000000000000000"}); },
     "items[2]: field \"chunks\" has 1 entries, expected 0"},
    {"ChunkNotHex", [](json& b) { Item0(b)["chunks"][2] = "0123456789abcdeg"; },
     "field \"chunks\" has an entry that is not 16 hex digits (entry 2)"},
    {"Chunk15Digits", [](json& b) { Item0(b)["chunks"][2] = "0123456789abcde"; },
     "not 16 hex digits"},
    {"Chunk17Digits", [](json& b) { Item0(b)["chunks"][2] = "0123456789abcdef0"; },
     "not 16 hex digits"},
    {"ChunkWith0xPrefix", [](json& b) { Item0(b)["chunks"][2] = "0x23456789abcdef"; },
     "not 16 hex digits"},
    {"ChunkNotString", [](json& b) { Item0(b)["chunks"][2] = 42; },
     "field \"chunks\" has an entry that is not a string"},
    // Layout.
    {"OverlappingItems",
     [](json& b) {
       b["items"][1]["file"] = 0;
       b["items"][1]["offset"] = 4096;
     },
     "\"model.dense.kernel\" and \"optimizer.θ.step\" overlap"},
    {"OverlappingByOneByte",
     [](json& b) {
       b["files"][0]["size"] = 24576 + 8;
       b["items"][1]["file"] = 0;
       b["items"][1]["offset"] = 24575;
     },
     "overlap"},
};

class ManifestHostileBodyTest : public ::testing::TestWithParam<BodyCase> {};

TEST_P(ManifestHostileBodyTest, IsDataLoss) {
  json body = ValidBodyJson();
  GetParam().mutate(body);
  StatusOr<StepInfo> got = DecodeManifest(WithHeader(body.dump()), kSource);
  ExpectDataLoss(got.status(), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Format, ManifestHostileBodyTest, ::testing::ValuesIn(kBodyCases),
                         [](const ::testing::TestParamInfo<BodyCase>& p) {
                           return std::string(p.param.name);
                         });

TEST(ManifestTest, AdjacentItemsInOneFileAreNotOverlapping) {
  json body = ValidBodyJson();
  body["files"][0]["size"] = 24576 + 8;
  body["items"][1]["file"] = 0;
  body["items"][1]["offset"] = 24576;
  StatusOr<StepInfo> got = DecodeManifest(WithHeader(body.dump()), kSource);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->items[1].offset, 24576u);
}

// ---------------------------------------------------------------------------
// The body is read as a stream of parser events, not as a document: the
// order of its fields, a field given twice and fields it does not know
// change nothing a document would not.

// `j` as JSON text with the keys of every object in reverse order.
std::string Reversed(const json& j) {
  std::string out;
  if (j.is_object()) {
    std::vector<std::string> fields;
    for (auto it = j.begin(); it != j.end(); ++it) {
      fields.push_back(json(it.key()).dump() + ":" + Reversed(it.value()));
    }
    for (size_t i = fields.size(); i-- > 0;) out += (out.empty() ? "" : ",") + fields[i];
    return "{" + out + "}";
  }
  if (j.is_array()) {
    for (const json& e : j) out += (out.empty() ? "" : ",") + Reversed(e);
    return "[" + out + "]";
  }
  return j.dump();
}

TEST(ManifestBodyTest, FieldsInAnyOrderDecodeTheSame) {
  const std::string reversed = Reversed(ValidBodyJson());
  ASSERT_LT(reversed.find("\"items\""), reversed.find("\"files\""));   // items before files
  ASSERT_LT(reversed.find("\"shape\""), reversed.find("\"chunks\""));  // chunks last
  StatusOr<StepInfo> got = DecodeManifest(WithHeader(reversed), kSource);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSameStep(*got, SampleStep());
}

// A body with two faults is refused for the same one in either order.
void ExpectFirstFault(const json& body, std::string_view want) {
  SCOPED_TRACE(want);
  ExpectDataLoss(DecodeManifest(WithHeader(body.dump()), kSource).status(), want);
  ExpectDataLoss(DecodeManifest(WithHeader(Reversed(body)), kSource).status(), want);
}

TEST(ManifestBodyTest, TheFaultNamedDoesNotDependOnTheOrderOfFields) {
  json body = ValidBodyJson();
  body["chunk_size"] = 6144;  // a top-level fault comes before any item's
  Item0(body).erase("name");
  ExpectFirstFault(body, "field \"chunk_size\" is not a power of two");

  // items[0]'s file index can be checked only once "files" is read, which
  // the reversed body gives after the items; items[1]'s fault is its own.
  body = ValidBodyJson();
  Item0(body)["file"] = 2;
  body["items"][1].erase("dtype");
  ExpectFirstFault(body, "items[0]: field \"file\" = 2 names no file");

  // A chunk entry is checked after the chunk count, which needs the chunk
  // size; items[1]'s fault still comes after.
  body = ValidBodyJson();
  Item0(body)["chunks"][2] = "not hex";
  body["items"][1]["name"] = 5;
  ExpectFirstFault(body,
                   "items[0]: field \"chunks\" has an entry that is not 16 hex digits (entry 2)");
  Item0(body)["chunks"].erase(5);
  ExpectFirstFault(body, "items[0]: field \"chunks\" has 5 entries, expected 6");

  body = ValidBodyJson();
  body["files"][1]["size"] = "8";
  body["items"][1]["name"] = 5;
  ExpectFirstFault(body, "files[1]: field \"size\" is not an integer");
}

TEST(ManifestBodyTest, AFieldGivenTwiceCountsAsItsLastValue) {
  const std::string body = ValidBodyJson().dump();
  // Earlier values, all bad, that later ones replace.
  std::string text = "{\"step\":-7,\"items\":{},\"files\":[1]," + body.substr(1);
  const std::string name = "\"name\":\"model.dense.kernel\"";
  text.replace(text.find(name), name.size(), "\"name\":5,\"shape\":[[]]," + name);
  StatusOr<StepInfo> got = DecodeManifest(WithHeader(text), kSource);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSameStep(*got, SampleStep());

  // A good value replaced by a bad one.
  text = body.substr(0, body.size() - 1) + ",\"items\":[7]}";
  ExpectDataLoss(DecodeManifest(WithHeader(text), kSource).status(), "items[0] is not an object");
}

TEST(ManifestBodyTest, UnknownFieldsAreSkippedAtEveryLevel) {
  const json nested = json::parse(R"({"a": [1, {"b": [[], {}, "c"]}], "d": null})");
  json body = ValidBodyJson();
  body["comment"] = nested;
  body["files"][0]["note"] = nested;
  body["files"][1]["shape"] = {1, 2};  // an item's field, in a file
  Item0(body)["layout"] = nested;
  Item0(body)["size"] = nested;  // a file's field, in an item
  StatusOr<StepInfo> got = DecodeManifest(WithHeader(body.dump()), kSource);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSameStep(*got, SampleStep());
}

TEST(ManifestBodyTest, ManyBadEntriesAreRefusedForTheFirst) {
  json body = ValidBodyJson();
  body["items"].push_back({{"name", 5}});
  for (int i = 0; i < 200000; ++i) body["items"].push_back(json::object());
  ExpectDataLoss(DecodeManifest(WithHeader(body.dump()), kSource).status(),
                 "items[3]: field \"name\" is not a string");
  body = ValidBodyJson();
  for (int i = 0; i < 200000; ++i) body["files"].push_back(i);
  ExpectDataLoss(DecodeManifest(WithHeader(body.dump()), kSource).status(),
                 "files[2] is not an object");
}

}  // namespace manifest_body_test
}  // namespace strata
