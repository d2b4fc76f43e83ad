// Copyright 2026 The Strata Authors.
//
// The agent's records of itself (agent_state.h): state.json survives a round
// trip, loads as an older release wrote it, and refuses what it cannot use
// whole; rollback.done holds one backup id or nothing. Each record these
// tests build is a seed of the agent_state fuzz target.
#include "agent/agent_state.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "test_util.h"

namespace strata::agent {
namespace {

SavedState Sample() {
  SavedState s;
  s.config.job_name = "llama";
  s.config.framework = Framework::kPytorchDistributed;
  s.config.node_rank = 2;
  s.config.nodes = 4;
  s.config.workers_per_node = 8;
  s.config.assume_data_parallelism = 2;
  s.config.master = "10.0.0.1:7701";
  s.round = 7;
  s.addresses = {{0, "10.0.0.1:7701"}, {3, "[fe80::1]:7701"}};
  s.peers = {3};
  s.restored_step = 120;
  s.quarantined = {100, 110};
  return s;
}

TEST(AgentStateTest, AStateSurvivesARoundTrip) {
  const std::string text = EncodeAgentState(Sample());
  testing::SaveFuzzSeed("agent_state", text);
  StatusOr<SavedState> back = DecodeAgentState(text, "state.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->config.job_name, "llama");
  EXPECT_EQ(back->config.framework, Framework::kPytorchDistributed);
  EXPECT_EQ(back->config.node_rank, 2);
  EXPECT_EQ(back->round, 7);
  EXPECT_EQ(back->addresses.at(3), "[fe80::1]:7701");
  EXPECT_EQ(back->restored_step, 120);
  EXPECT_EQ(back->quarantined, (std::set<int64_t>{100, 110}));
  EXPECT_EQ(EncodeAgentState(*back), text);
}

// An older release wrote no redundancy, group, restored step or quarantine.
TEST(AgentStateTest, AnOlderStateLoadsWithDefaults) {
  const std::string old =
      R"({"job":"j","framework":"orbax","node":0,"nodes":2,"workers":1,"round":3,)"
      R"("peers":[1],"addresses":{"1":"127.0.0.1:7702"},"dp":1,"master":""})";
  testing::SaveFuzzSeed("agent_state", old);
  StatusOr<SavedState> s = DecodeAgentState(old, "state.json");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->restored_step, -1);
  EXPECT_TRUE(s->quarantined.empty());
  EXPECT_FALSE(s->group.has_value());
}

TEST(AgentStateTest, WhatCannotBeUsedWholeIsRefused) {
  std::string good = EncodeAgentState(Sample());
  for (const std::string& bad :
       {std::string(""), std::string("[]"), std::string("{\"job\": 1}"),
        good.replace(good.find("\"llama\""), 7, "\"../../etc\""),
        EncodeAgentState(Sample()).replace(EncodeAgentState(Sample()).find("\"round\":7"), 9,
                                           "\"round\":\"7\"")}) {
    testing::SaveFuzzSeed("agent_state", bad);
    StatusOr<SavedState> s = DecodeAgentState(bad, "/x/state.json");
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("/x/state.json"), std::string::npos)
        << s.status().ToString();
  }
}

// The bytes this release writes, fixed: a state file on disk must still be
// read (and written the same) by every later release.
constexpr char kGoldenState[] =
    R"j({"addresses":{"0":"10.0.0.1:7701","3":"[fe80::1]:7701"},"dp":2,)j"
    R"j("framework":"pytorch.distributed","job":"llama","master":"10.0.0.1:7701","node":2,)j"
    R"j("nodes":4,"peers":[3],"quarantined":[100,110],"redundancy":"copies",)j"
    R"j("restored_step":120,"round":7,"workers":8})j";
constexpr char kGoldenCodedState[] =
    R"j({"addresses":{"0":"10.0.0.1:7701","3":"[fe80::1]:7701"},"dp":1,"framework":"orbax",)j"
    R"j("group":{"code":"rs","m":2,"members":[0,1,2,3]},"job":"llama","master":"","node":2,)j"
    R"j("nodes":4,"peers":[3],"redundancy":"rs(2,2)","restored_step":120,"round":7,"workers":8})j";

SavedState CodedSample() {
  SavedState s = Sample();
  s.config.framework = Framework::kOrbax;
  s.config.assume_data_parallelism.reset();
  s.config.master.reset();
  s.quarantined.clear();
  s.redundancy = ec::Redundancy{ec::Redundancy::Kind::kRs, 2, 2};
  s.group = ec::Group{{0, 1, 2, 3}, ec::Redundancy::Kind::kRs, 2};
  return s;
}

TEST(AgentStateTest, TheBytesOnDiskAreFixed) {
  EXPECT_EQ(EncodeAgentState(Sample()), kGoldenState);
  EXPECT_EQ(EncodeAgentState(CodedSample()), kGoldenCodedState);
  for (const char* golden : {kGoldenState, kGoldenCodedState}) {
    StatusOr<SavedState> s = DecodeAgentState(golden, "state.json");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(EncodeAgentState(*s), golden);
  }
  StatusOr<SavedState> coded = DecodeAgentState(kGoldenCodedState, "state.json");
  ASSERT_TRUE(coded.ok());
  EXPECT_EQ(coded->config.framework, Framework::kOrbax);
  EXPECT_EQ(coded->config.assume_data_parallelism, std::optional<int>(1));
  EXPECT_FALSE(coded->config.master.has_value());
  ASSERT_TRUE(coded->group.has_value());
  EXPECT_EQ(coded->group->members, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(coded->redundancy.ToString(), CodedSample().redundancy.ToString());
}

// A field that is missing or cannot be read is named, with the file.
TEST(AgentStateTest, AMalformedFieldIsNamed) {
  const nlohmann::json good = nlohmann::json::parse(kGoldenState);
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, std::string>>{{"job", "1"},
                                                        {"framework", "1"},
                                                        {"node", "1099511627776"},
                                                        {"dp", "2.5"},
                                                        {"master", "3"},
                                                        {"round", "\"7\""},
                                                        {"addresses", "[\"10.0.0.1:7701\"]"},
                                                        {"addresses", "{\"x\": \"10.0.0.1:7701\"}"},
                                                        {"peers", "[1.5]"},
                                                        {"redundancy", "\"sideways\""},
                                                        {"group", "{\"members\": [0, 1]}"},
                                                        {"restored_step", "true"},
                                                        {"quarantined", "[\"100\"]"}}) {
    nlohmann::json bad = good;
    bad[field] = nlohmann::json::parse(value);
    StatusOr<SavedState> s = DecodeAgentState(bad.dump(), "/x/state.json");
    ASSERT_FALSE(s.ok()) << field << ": " << value;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("/x/state.json"), std::string::npos);
    EXPECT_NE(s.status().message().find("\"" + field + "\""), std::string::npos)
        << s.status().ToString();
  }
  nlohmann::json steps = good;
  steps["quarantined"] = {100, "110"};
  EXPECT_NE(DecodeAgentState(steps.dump(), "/x/state.json").status().message().find("entry 1"),
            std::string::npos);
  for (const char* field : {"job", "nodes", "peers", "addresses", "master"}) {
    nlohmann::json bad = good;
    bad.erase(field);
    StatusOr<SavedState> s = DecodeAgentState(bad.dump(), "/x/state.json");
    ASSERT_FALSE(s.ok()) << field;
    EXPECT_NE(s.status().message().find("\"" + std::string(field) + "\" is missing"),
              std::string::npos)
        << s.status().ToString();
  }
}

TEST(AgentStateTest, ARollbackRecordHoldsOneBackupId) {
  for (const char* id : {"2026-11-28_12-00", "2026-11-28_12-00.2"}) {
    testing::SaveFuzzSeed("agent_state", id);
    EXPECT_EQ(EncodeRollbackRecord(id), id);  // the bytes on disk
    StatusOr<std::string> back = DecodeRollbackRecord(id, "/x/rollback.done");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, id);
  }
  for (const char* bad : {"", "2026-11-28_12-00\n", "latest", "2026-13-01_00-00"}) {
    StatusOr<std::string> back = DecodeRollbackRecord(bad, "/x/rollback.done");
    ASSERT_FALSE(back.ok()) << bad;
    EXPECT_NE(back.status().message().find("/x/rollback.done"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata::agent
