// Copyright 2026 The Strata Authors.
//
// The agent's records of itself (agent_state.h): state.json survives a round
// trip, loads as an older release wrote it, and refuses what it cannot use
// whole; rollback.done holds one backup id or nothing. Each record these
// tests build is a seed of the agent_state fuzz target.
#include "agent/agent_state.h"

#include <gtest/gtest.h>

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

TEST(AgentStateTest, ARollbackRecordHoldsOneBackupId) {
  for (const char* id : {"2026-11-28_12-00", "2026-11-28_12-00.2"}) {
    testing::SaveFuzzSeed("agent_state", id);
    EXPECT_EQ(DecodeRollbackRecord(id), std::optional<std::string>(id));
  }
  for (const char* bad : {"", "2026-11-28_12-00\n", "latest", "2026-13-01_00-00"}) {
    EXPECT_EQ(DecodeRollbackRecord(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace strata::agent
