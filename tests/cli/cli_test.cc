// Copyright 2026 The Strata Authors.
//
// The CLI, called in-process through RunCli.
#include "cli/cli.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "format/naming.h"
#include "net/job_key.h"
#include "strata/checkpointer.h"
#include "test_util.h"

namespace strata::cli {
namespace {

using testing::ScratchDir;

// Writes steps 10 and 20 of a small state into `dir`.
void MakeCheckpoints(const std::string& dir) {
  CheckpointerOptions o;
  o.preemption_signals = {};
  o.async = false;
  o.chunk_size = 4096;
  auto c = Checkpointer::Open(dir, o);
  ASSERT_TRUE(c.ok());
  std::vector<float> w(10000, 1.5f);
  std::vector<Item> items = {{"weights", DType::kFloat32, {100, 100}, w.data(), w.size() * 4}};
  ASSERT_TRUE((*c)->Save(10, items).ok());
  w[5] = 2;
  ASSERT_TRUE((*c)->Save(20, items).ok());
}

TEST(CliTest, VersionAndHelp) {
  auto r = Cli({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("strata "), std::string::npos);
  r = Cli({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("verify"), std::string::npos);
  r = Cli({"verify", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--step"), std::string::npos);
}

// `strata secret new`: 32 random bytes, base64, one line; a new one each
// time, and one the agents accept.
TEST(CliTest, SecretNewMakesAStrongSecret) {
  auto a = Cli({"secret", "new"}), b = Cli({"secret", "new"});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(a.out.size(), 45u) << a.out;
  EXPECT_EQ(a.out.back(), '\n');
  EXPECT_NE(a.out, b.out);
  EXPECT_TRUE(net::CheckSecret(a.out.substr(0, 44), "strata secret new").ok());
}

TEST(CliTest, BadUsageExitsTwo) {
  EXPECT_EQ(Cli({}).code, 2);
  EXPECT_EQ(Cli({"frobnicate"}).code, 2);
  auto r = Cli({"inspect", "/x"});  // --step is required
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--step"), std::string::npos);
}

TEST(CliTest, LsListsSteps) {
  ScratchDir d;
  MakeCheckpoints(d.path());
  auto r = Cli({"ls", d.path()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("10"), std::string::npos);
  EXPECT_NE(r.out.find("20"), std::string::npos);
  r = Cli({"ls", d.path(), "--json"});
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["step"], 20);
  EXPECT_EQ(j[1]["bytes"], 40000);
}

TEST(CliTest, LsOfMissingDirectoryNamesIt) {
  auto r = Cli({"ls", "/nonexistent/strata"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/strata"), std::string::npos);
}

TEST(CliTest, VerifyPassesThenNamesTheCorruptChunk) {
  ScratchDir d;
  MakeCheckpoints(d.path());
  auto r = Cli({"verify", d.path()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("step 20: OK"), std::string::npos);
  testing::FlipByte(d.path() + "/20/" + DataFileName(0), 3 * 4096 + 7);
  r = Cli({"verify", d.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("step 10: OK"), std::string::npos);
  EXPECT_NE(r.out.find("step 20 item \"weights\" chunk 3"), std::string::npos) << r.out;
  r = Cli({"verify", d.path(), "--step", "10"});
  EXPECT_EQ(r.code, 0);
  r = Cli({"verify", d.path(), "--step", "20", "--json"});
  EXPECT_EQ(r.code, 1);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j[0]["ok"], false);
}

TEST(CliTest, VerifyOfMissingStepFails) {
  ScratchDir d;
  MakeCheckpoints(d.path());
  auto r = Cli({"verify", d.path(), "--step", "15"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/15/strata.manifest"), std::string::npos) << r.out;
  ScratchDir empty;
  r = Cli({"verify", empty.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no checkpoint"), std::string::npos);
}

TEST(CliTest, InspectShowsItems) {
  ScratchDir d;
  MakeCheckpoints(d.path());
  auto r = Cli({"inspect", d.path(), "--step", "20"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("weights"), std::string::npos);
  EXPECT_NE(r.out.find("float32"), std::string::npos);
  EXPECT_NE(r.out.find("[100, 100]"), std::string::npos);
  r = Cli({"inspect", d.path(), "--step", "20", "--json"});
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["items"][0]["chunk_xxh3"].size(), 10u);
}

}  // namespace
}  // namespace strata::cli
