// Copyright 2026 The Strata Authors.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "test_util.h"
#include "wire/coded.h"
#include "wire/control.h"
#include "wire/coordination.h"
#include "wire/data.h"
#include "wire/json.h"
#include "wire/op.h"

namespace strata::wire {
namespace {

using nlohmann::json;

// Sent(m), kept as a seed of the wire fuzz target (test_util.h).
template <typename M>
json Sent(const M& m) {
  json j = m.ToJson();
  testing::SaveFuzzSeed("wire", j.dump());
  return j;
}

TEST(WireOpTest, EveryNameRoundTripsAndIsUnique) {
  std::set<std::string> names;
  for (size_t i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    const std::string name = OpName(op);
    EXPECT_TRUE(names.insert(name).second) << name;
    auto parsed = ParseOp(Request(op));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, op) << name;
  }
  EXPECT_EQ(names.size(), kOpCount);
  EXPECT_EQ(kOpCount, 21u);
}

// The kinds decide routing: long calls take the connection, coordination
// calls go to the coordinator, control calls are answered by the agent.
TEST(WireOpTest, KindsRouteTheCalls) {
  EXPECT_EQ(KindOf(Op::kRegister), OpKind::kCoordination);
  EXPECT_EQ(KindOf(Op::kSync), OpKind::kCoordination);
  EXPECT_EQ(KindOf(Op::kStatus), OpKind::kControl);
  EXPECT_EQ(KindOf(Op::kGetIndex), OpKind::kControl);
  EXPECT_EQ(KindOf(Op::kPutStep), OpKind::kLong);
  EXPECT_EQ(KindOf(Op::kFetchStep), OpKind::kLong);
  EXPECT_EQ(KindOf(Op::kQuarantine), OpKind::kLong);
  EXPECT_TRUE(IsLongCall("put_step"));
  EXPECT_TRUE(IsLongCall("maintenance"));
  EXPECT_FALSE(IsLongCall("status"));
  EXPECT_FALSE(IsLongCall("register"));
  EXPECT_FALSE(IsLongCall("no_such_call"));
}

TEST(WireOpTest, BadOpsAreClearErrors) {
  auto missing = ParseOp(json{{"job", "j"}});
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("\"op\""), std::string::npos);
  EXPECT_EQ(ParseOp(json{{"op", 7}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseOp(json::array()).status().code(), StatusCode::kInvalidArgument);
  auto unknown = ParseOp(json{{"op", "members"}});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "unknown call \"members\"");
  auto long_name = ParseOp(json{{"op", std::string(1000, 'x')}});
  EXPECT_EQ(long_name.status().message(), "unknown call \"" + std::string(32, 'x') + "\"");
}

// What a sender builds is what the coordinator parses, field for field.
TEST(WireCoordinationTest, RequestsRoundTrip) {
  RegisterRequest reg;
  reg.job = "job1";
  reg.node = 3;
  reg.nodes = 8;
  reg.dp = 2;
  reg.address = {"10.0.0.3", 7701};
  reg.incarnation = "abc";
  reg.inventory = {{3, 20, 0x1234}, {7, 20, 0xffffffffffffffffull}};
  reg.cadence.backup_interval_steps = 100;
  reg.cadence.workers_per_node = 4;
  auto back = RegisterRequest::FromJson(Sent(reg));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job, "job1");
  EXPECT_EQ(back->node, 3);
  EXPECT_EQ(back->nodes, 8);
  EXPECT_EQ(back->dp, 2);
  EXPECT_EQ(back->address, reg.address);
  EXPECT_EQ(back->incarnation, "abc");
  EXPECT_EQ(back->inventory, reg.inventory);
  EXPECT_EQ(back->cadence.backup_interval_steps, 100);
  EXPECT_FALSE(back->cadence.backup_interval_minutes.has_value());
  EXPECT_EQ(back->cadence.workers_per_node, 4);
  EXPECT_EQ(*ParseOp(Sent(reg)), Op::kRegister);

  ReadyRequest ready;
  ready.job = "job1";
  ready.round = 5;
  ready.node = 1;
  ready.plan_version = 2;
  ready.ok = false;
  ready.bad = {{-1, 1, 20}, {4, 1, 20}};  // the backup, a peer
  ready.wait = std::chrono::milliseconds(1500);
  // Through text, as on the wire.
  auto ready_back = ReadyRequest::FromJson(json::parse(Sent(ready).dump()));
  ASSERT_TRUE(ready_back.ok()) << ready_back.status().ToString();
  EXPECT_EQ(ready_back->bad, ready.bad);
  EXPECT_EQ(ready_back->wait, ready.wait);
  EXPECT_EQ(ready_back->plan_version, 2);

  AwaitPlanRequest whole;  // no node: the whole plan
  whole.job = "job1";
  whole.round = 1;
  auto whole_back = AwaitPlanRequest::FromJson(Sent(whole));
  ASSERT_TRUE(whole_back.ok()) << whole_back.status().ToString();
  EXPECT_FALSE(whole_back->node.has_value());

  SyncRequest sync;
  sync.job = "job1";
  sync.node = 7;
  sync.step = 120;
  sync.rate = 2.5;
  sync.generation = 3;
  sync.collect = 9;
  auto sync_back = SyncRequest::FromJson(json::parse(Sent(sync).dump()));
  ASSERT_TRUE(sync_back.ok()) << sync_back.status().ToString();
  EXPECT_EQ(sync_back->step, 120);
  EXPECT_EQ(sync_back->rate, 2.5);
  EXPECT_EQ(sync_back->generation, 3u);
  EXPECT_EQ(sync_back->collect, 9u);
  EXPECT_FALSE(sync_back->wait.has_value());
  EXPECT_FALSE(sync_back->round.has_value());  // an older agent's call
  sync.round = 4;
  sync_back = SyncRequest::FromJson(json::parse(Sent(sync).dump()));
  ASSERT_TRUE(sync_back.ok()) << sync_back.status().ToString();
  EXPECT_EQ(sync_back->round, 4);
}

// A malformed request is INVALID_ARGUMENT naming the call and the field,
// before any handler runs.
TEST(WireCoordinationTest, MalformedFieldsAreNamed) {
  struct Case {
    json request;
    std::string message;
  };
  const json reg = RegisterRequest{"job1", 0, 2, 1, {"h", 1}, "", {}, {}}.ToJson();
  auto with = [](json j, const std::string& key, json value) {
    j[key] = std::move(value);
    return j;
  };
  auto without = [](json j, const std::string& key) {
    j.erase(key);
    return j;
  };
  for (const Case& c : std::vector<Case>{
           {without(reg, "job"), "register: \"job\" is missing"},
           {with(reg, "job", 7), "register: \"job\" must be a string"},
           {with(reg, "job", "../x"), "register: "},
           {with(reg, "nodes", 0), "register: \"nodes\" must be an integer in 1..100000"},
           {with(reg, "node", 2), "register: \"node\" must be an integer in 0..1"},
           {with(reg, "node", "0"), "register: \"node\" must be an integer"},
           {with(reg, "dp", 3), "register: \"dp\" must be an integer in 1..2"},
           {with(reg, "address", "nohost"), "register: \"address\": \"nohost\" is not host:port"},
           {with(reg, "inventory", json::array({json::array({0, 1})})),
            "register: \"inventory\" must be a list of [rank, step, \"digest\"]"},
           {with(reg, "inventory", json::array({json::array({0, 1, "xyz"})})),
            "register: \"inventory\" must be"},
           {with(reg, "quarantined", json::array({40, -1})),
            "register: \"quarantined\" must be a list of steps"},
           {json{{"op", "ready"}, {"job", "j"}, {"round", 1}, {"node", 0}, {"ok", "yes"}},
            "ready: \"ok\" must be true or false"},
           {json{{"op", "ready"}, {"job", "j"}, {"round", 1}, {"node", 0}, {"bad", {{1, 2}}}},
            "ready: \"bad\" must be a list of [holder, rank, step]"},
           {json{{"op", "await_plan"}, {"job", "j"}, {"round", 1}, {"peers", {"x"}}},
            "await_plan: \"peers\" must be a list of node ranks"},
           {json{{"op", "sync"}, {"job", "j"}, {"node", 0}, {"wait_ms", -5}},
            "sync: \"wait_ms\" must be a non-negative integer"},
           {json{{"op", "quarantine_step"}, {"job", "j"}, {"node", 0}},
            "quarantine_step: \"step\" is missing"},
           {json::array(), "register: the request is not an object"},
       }) {
    SCOPED_TRACE(c.request.dump());
    Status s;
    switch (ParseOp(c.request).value_or(Op::kRegister)) {
      case Op::kReady:
        s = ReadyRequest::FromJson(c.request).status();
        break;
      case Op::kAwaitPlan:
        s = AwaitPlanRequest::FromJson(c.request).status();
        break;
      case Op::kSync:
        s = SyncRequest::FromJson(c.request).status();
        break;
      case Op::kQuarantineStep:
        s = QuarantineStepRequest::FromJson(c.request).status();
        break;
      default:
        s = RegisterRequest::FromJson(c.request).status();
    }
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.ToString();
  }
}

// The plan the coordinator sends is the plan the node reads.
TEST(WireCoordinationTest, APlanRoundTripsAndAMalformedOneIsRefused) {
  PlanReply plan;
  plan.round = 4;
  plan.plan_version = 2;
  plan.step = 120;
  plan.sources[3] = {3, {3, 7, wire::kBackupHolder}, 0xabcdef};
  plan.addresses = {{3, "10.0.0.3:7701"}, {7, "[::1]:7701"}};
  plan.reason = "step 120 is complete for all 8 nodes";
  plan.backup = "2026-11-24_10-00";
  plan.discard_above = 130;
  auto back = PlanReply::FromJson(json::parse(Sent(plan).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->round, 4);
  EXPECT_EQ(back->plan_version, 2);
  EXPECT_EQ(back->step, 120);
  EXPECT_EQ(back->sources, plan.sources);
  EXPECT_EQ(back->addresses, plan.addresses);
  EXPECT_EQ(back->reason, plan.reason);
  EXPECT_EQ(back->backup, plan.backup);
  EXPECT_TRUE(back->error.empty());
  EXPECT_EQ(back->discard_above, 130);

  PlanReply fresh;  // nothing to restore
  fresh.round = 1;
  fresh.plan_version = 1;
  auto fresh_back = PlanReply::FromJson(Sent(fresh));
  ASSERT_TRUE(fresh_back.ok()) << fresh_back.status().ToString();
  EXPECT_FALSE(fresh_back->step.has_value());
  EXPECT_FALSE(fresh_back->discard_above.has_value());

  json broken = Sent(plan);
  broken["sources"]["3"]["digest"] = "not hex";
  EXPECT_EQ(PlanReply::FromJson(broken).status().code(), StatusCode::kInvalidArgument);
  broken = Sent(plan);
  broken["addresses"]["x"] = "h:1";
  EXPECT_EQ(PlanReply::FromJson(broken).status().code(), StatusCode::kInvalidArgument);
  broken = Sent(plan);
  broken.erase("plan_version");
  EXPECT_EQ(PlanReply::FromJson(broken).status().code(), StatusCode::kInvalidArgument);
}

// Malformed input found by reading the codec: a decode entry without its
// group (a missing key read on a const JSON value), the field that is
// missing named as itself, and integers beyond their C++ type refused
// rather than truncated.
TEST(WireCoordinationTest, MalformedPlansAreRefusedNamingTheField) {
  PlanReply plan;
  plan.round = 4;
  plan.plan_version = 2;
  plan.step = 120;
  wire::DecodeSource decode;
  decode.group.members = {0, 1, 2, 3};
  decode.group.kind = ec::Redundancy::Kind::kRs;
  decode.group.m = 2;
  decode.stripes = {{0, {{0, 0, 0}, {1, 1, 1}}}, {1, {{2, 2, wire::kParityRank}, {3, 3, 3}}}};
  plan.sources[1] = {1, {2}, 0x1234, decode};
  auto back = PlanReply::FromJson(json::parse(Sent(plan).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sources, plan.sources);

  auto refused = [&](const json& j, const std::string& names) {
    auto r = PlanReply::FromJson(j);
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << j.dump();
    EXPECT_NE(r.status().message().find(names), std::string::npos) << r.status().ToString();
  };
  json j = Sent(plan);
  j["sources"]["1"]["decode"].erase("group");
  refused(j, "a group is");
  for (const json& group : {json(nullptr), json(7), json::object()}) {
    j = Sent(plan);
    j["sources"]["1"]["decode"]["group"] = group;
    refused(j, "a group is");
  }
  j = Sent(plan);
  j.erase("round");
  refused(j, "\"round\"");
  j = Sent(plan);
  j["round"] = "4";
  refused(j, "\"round\"");
  j = Sent(plan);
  j.erase("plan_version");
  refused(j, "\"plan_version\"");
  const int64_t huge = int64_t{1} << 40;  // get<int> would make it 0
  j = Sent(plan);
  j["sources"]["1"]["source_rank"] = huge;
  refused(j, "\"sources\"");
  j = Sent(plan);
  j["sources"]["1"]["holders"] = {huge};
  refused(j, "\"sources\"");
  j = Sent(plan);
  j["sources"]["1"]["holders"] = {-5};
  refused(j, "\"sources\"");
  j = Sent(plan);
  j["sources"]["1"]["decode"]["stripes"][0][1][0][1] = huge;
  refused(j, "a shard is");
}

TEST(WireDataTest, AStepKeyRankBeyondIntIsRefusedNotTruncated) {
  EXPECT_TRUE(wire::StepKeyFromJson({{"job", "j"}, {"rank", 3}, {"step", 5}}).ok());
  for (int64_t rank : {int64_t{1} << 40, int64_t{1} << 32, int64_t{-1}}) {
    auto key = wire::StepKeyFromJson({{"job", "j"}, {"rank", rank}, {"step", 5}});
    EXPECT_EQ(key.status().code(), StatusCode::kInvalidArgument) << rank;
  }
}

// The coded tier's calls fed malformed input: every field missing, of the
// wrong type and out of range is INVALID_ARGUMENT naming the call (a
// wrong-typed boolean used to throw out of the parser).
TEST(WireCodedTest, MalformedShardCallsAreRefusedNamingTheCall) {
  GetShardRequest get;
  get.key = {"job", 2, 40};
  get.digest = 0xfeed;
  get.group.members = {0, 1, 2, 3};
  get.group.kind = ec::Redundancy::Kind::kRs;
  get.group.m = 2;
  get.chunk = 1;
  get.index_of = 3;
  auto back = GetShardRequest::FromJson(json::parse(Sent(get).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->digest, get.digest);
  EXPECT_EQ(back->chunk, 1);
  EXPECT_EQ(back->index_of, 3);
  GetShardRequest parity = get;
  parity.parity = true;
  parity.stripe = 1;
  parity.row = 0;
  ASSERT_TRUE(GetShardRequest::FromJson(Sent(parity)).ok());

  const int64_t huge = int64_t{1} << 40;
  const std::vector<std::pair<std::string, json>> bad = {
      {"key", nullptr},   {"key", {{"job", "job"}, {"rank", huge}, {"step", 40}}},
      {"group", nullptr}, {"group", {{"members", {0, 1}}, {"code", "lz4"}, {"m", 1}}},
      {"parity", "yes"},  {"parity", 1},
      {"digest", 7},      {"digest", "xyz"},
      {"chunk", "1"},     {"chunk", huge},
      {"chunk", -1},      {"index_of", huge},
      {"index_of", "3"},  {"header_only", "no"}};
  for (const auto& [field, value] : bad) {
    json j = Sent(get);
    j[field] = value;
    auto r = GetShardRequest::FromJson(j);
    ASSERT_FALSE(r.ok()) << field << " = " << value.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(r.status().message().find(OpName(Op::kGetShard)), std::string::npos)
        << r.status().ToString();
  }
  for (const char* field : {"key", "group", "digest", "chunk"}) {
    json j = Sent(get);
    j.erase(field);
    EXPECT_EQ(GetShardRequest::FromJson(j).status().code(), StatusCode::kInvalidArgument) << field;
  }
  for (const char* field : {"stripe", "row"}) {
    json j = Sent(parity);
    j[field] = huge;
    EXPECT_EQ(GetShardRequest::FromJson(j).status().code(), StatusCode::kInvalidArgument) << field;
    j.erase(field);
    EXPECT_EQ(GetShardRequest::FromJson(j).status().code(), StatusCode::kInvalidArgument) << field;
  }
  for (const json& j : {json(nullptr), json::array(), json("get_shard")}) {
    EXPECT_EQ(GetShardRequest::FromJson(j).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(ShardReply::FromJson(j).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(PutShardReady::FromJson(j).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(PutShardRequest::FromJson(j).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(WireDataTest, AReplyWithAMalformedErrorIsInternalNotAThrow) {
  EXPECT_TRUE(wire::StatusFromJson({{"ok", true}}, "peer 3").ok());
  Status s = wire::StatusFromJson({{"ok", false}, {"code", 5}, {"error", "no step 7"}}, "peer 3");
  EXPECT_EQ(s.code(), static_cast<StatusCode>(5));
  EXPECT_EQ(s.message(), "peer 3: no step 7");
  for (const json& reply :
       {json{{"ok", false}, {"code", "5"}, {"error", 7}},
        json{{"ok", false}, {"code", int64_t{1} << 40}}, json{{"ok", "yes"}}, json(nullptr)}) {
    Status bad = wire::StatusFromJson(reply, "peer 3");
    EXPECT_EQ(bad.code(), StatusCode::kInternal) << reply.dump();
    EXPECT_EQ(bad.message().rfind("peer 3: ", 0), 0u) << bad.ToString();
  }
  // A fetch whose digest is not a string is refused, not thrown.
  json fetch = FetchStepRequest{{"job", 1, 5}, 0x77, std::vector<size_t>{1}}.ToJson();
  fetch["digest"] = 77;
  EXPECT_EQ(FetchStepRequest::FromJson(fetch).status().code(), StatusCode::kInvalidArgument);
}

// The on-demand step decision, as every sync call and "go" carries it.
TEST(WireCoordinationTest, ASyncDecisionRoundTrips) {
  SyncDecision d;
  d.generation = 7;
  d.round = 3;
  d.collect = 12;
  d.collecting = false;
  d.step = 600;
  d.notice_unix_ms = 1795000000123;
  d.notice_step = 597;
  d.origin = "node 4 (SIGTERM)";
  auto back = SyncDecision::FromJson(json::parse(Sent(d).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->generation, 7u);
  EXPECT_EQ(back->round, 3);
  EXPECT_EQ(back->collect, 12u);
  EXPECT_EQ(back->step, 600);
  EXPECT_EQ(back->notice_unix_ms, 1795000000123);
  EXPECT_EQ(back->notice_step, 597);
  EXPECT_EQ(back->origin, "node 4 (SIGTERM)");

  SyncDecision none;  // collecting, nothing decided yet
  none.generation = 1;
  none.round = 1;
  none.collect = 2;
  none.collecting = true;
  auto none_back = SyncDecision::FromJson(json::parse(Sent(none).dump()));
  ASSERT_TRUE(none_back.ok()) << none_back.status().ToString();
  EXPECT_TRUE(none_back->collecting);
  EXPECT_FALSE(none_back->step.has_value());

  json broken = Sent(d);
  broken["step"] = "600";
  EXPECT_EQ(SyncDecision::FromJson(broken).status().code(), StatusCode::kInvalidArgument);
  broken = Sent(d);
  broken.erase("generation");
  auto missing = SyncDecision::FromJson(broken);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("\"generation\" is missing"), std::string::npos);
}

// The data calls' messages: what a peer sends is what the agent parses.
TEST(WireDataTest, MessagesRoundTripAndMalformedOnesAreNamed) {
  StepIndex index;
  index.digest = 0x77;
  index.files = {{"a.bin", 3, {0x1}}, {"b.bin", 0, {}}};
  index.total_bytes = 3;
  const wire::StepKey key{"job1", 2, 40};
  auto put = PutStepRequest::FromJson(
      json::parse(PutStepRequest{key, index, 4, false, {}}.ToJson().dump()));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->key, key);
  EXPECT_EQ(put->index.digest, 0x77u);
  EXPECT_EQ(put->index.files.size(), 2u);
  EXPECT_EQ(put->streams, 4);
  auto ready = PutStepReady::FromJson(json::parse(PutStepReady{false, 9, {}}.ToJson().dump()));
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_FALSE(ready->have);
  EXPECT_EQ(ready->transfer, 9u);
  auto files = PutFilesRequest::FromJson(PutFilesRequest{9, {0, 1}, {}}.ToJson());
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->files, (std::vector<size_t>{0, 1}));
  auto fetch = FetchStepRequest::FromJson(
      json::parse(FetchStepRequest{key, 0x77, std::vector<size_t>{1}}.ToJson().dump()));
  ASSERT_TRUE(fetch.ok()) << fetch.status().ToString();
  EXPECT_EQ(fetch->digest, 0x77u);
  EXPECT_EQ(fetch->files, std::vector<size_t>{1});
  auto whole = FetchStepRequest::FromJson(FetchStepRequest{key, {}, {}}.ToJson());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_FALSE(whole->files.has_value());

  json bad = PutStepRequest{key, index, 1, false, {}}.ToJson();
  bad["key"]["job"] = "../etc";
  auto hostile = PutStepRequest::FromJson(bad);
  EXPECT_EQ(hostile.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(hostile.status().message().find("put_step: \"key\""), std::string::npos)
      << hostile.status().ToString();
  bad = PutStepRequest{key, index, 1, false, {}}.ToJson();
  bad["streams"] = 1000;
  EXPECT_EQ(PutStepRequest::FromJson(bad).status().code(), StatusCode::kInvalidArgument);
  auto repeated =
      PutFilesRequest::FromJson(json{{"op", "put_files"}, {"transfer", 1}, {"files", {1, 1}}});
  EXPECT_NE(repeated.status().message().find("put_files: \"files\" must be increasing"),
            std::string::npos)
      << repeated.status().ToString();
  auto no_digest = FetchStepRequest::FromJson(
      json{{"op", "fetch_step"}, {"key", wire::StepKeyToJson(key)}, {"files", {0}}});
  EXPECT_EQ(no_digest.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckFilePositions({0, 1}, 2).ok());
  EXPECT_EQ(CheckFilePositions({0, 2}, 2).code(), StatusCode::kInvalidArgument);
}

// Replication by content: the offered ranges (checked against the index),
// the ranges the receiver needs and the range group a put_files carries.
TEST(WireDataTest, DedupFieldsRoundTripAndRangesOutsideTheStepAreRefused) {
  StepIndex index;
  index.strata = true;
  index.digest = 0x77;
  index.files = {{"data-00000.bin", 100, {}}, {"strata.manifest", 40, {}}};
  index.total_bytes = 140;
  const wire::StepKey key{"job1", 2, 40};
  wire::RangePlan offer;
  offer.files = {{{0, 60, 0xabc, -1, 0}, {60, 40, 0xdef, -1, 0}}, {}};
  PutStepRequest offered{key, index, 1, true, offer};
  offered.range_streams = 4;
  auto put = PutStepRequest::FromJson(json::parse(Sent(offered).dump()));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE(put->dedup);
  EXPECT_EQ(put->range_streams, 4);
  ASSERT_TRUE(put->ranges.has_value());
  ASSERT_EQ(put->ranges->files.size(), 2u);
  ASSERT_EQ(put->ranges->files[0].size(), 2u);
  EXPECT_EQ(put->ranges->files[0][1].offset, 60u);
  EXPECT_EQ(put->ranges->files[0][1].length, 40u);
  EXPECT_EQ(put->ranges->files[0][1].xxh3, 0xdefu);
  EXPECT_FALSE(PutStepRequest::FromJson(PutStepRequest{key, index, 1, false, {}}.ToJson())->dedup);

  json beyond = PutStepRequest{key, index, 1, true, offer}.ToJson();
  beyond["ranges"][1][2] = 41;  // [60, 101) of a 100-byte file
  auto refused = PutStepRequest::FromJson(beyond);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("is not in the step"), std::string::npos)
      << refused.status().ToString();
  beyond = PutStepRequest{key, index, 1, true, offer}.ToJson();
  beyond["ranges"][0][0] = 2;  // no third file
  EXPECT_EQ(PutStepRequest::FromJson(beyond).status().code(), StatusCode::kInvalidArgument);

  PutStepReady ready{false, 5,
                     std::vector<std::vector<wire::FileRange>>{{{0, 0, 60}}, {{1, 0, 40}}}};
  auto back = PutStepReady::FromJson(json::parse(Sent(ready).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->need.has_value());
  EXPECT_EQ(*back->need, *ready.need);
  auto nothing = PutStepReady::FromJson(
      PutStepReady{false, {}, std::vector<std::vector<wire::FileRange>>{}}.ToJson());
  ASSERT_TRUE(nothing.ok());
  ASSERT_TRUE(nothing->need.has_value());  // every byte was held: none to send
  EXPECT_TRUE(nothing->need->empty());
  json bad_need = Sent(ready);
  bad_need["need"][0][0] = json{0, 0};
  EXPECT_EQ(PutStepReady::FromJson(bad_need).status().code(), StatusCode::kInvalidArgument);

  auto group = PutFilesRequest::FromJson(PutFilesRequest{5, {}, 1}.ToJson());
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  EXPECT_EQ(group->group, 1u);
  EXPECT_TRUE(group->files.empty());
}

// The answer to a replication report: the watermark and the backup state.
TEST(WireCoordinationTest, AReplicatedReplyRoundTrips) {
  ReplicatedReply r;
  r.watermark = 40;
  r.newest_backup = ReplicatedReply::Backup{"2026-11-24_10-00", 30, 1795000000, 1795000060};
  r.backup_error = "backup 2026-11-24_09-00: node 3: upload failed";
  r.backup_task = ReplicatedReply::Task{"2026-11-24_10-10", 40, 3};
  auto back = ReplicatedReply::FromJson(json::parse(Sent(r).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->watermark, 40);
  ASSERT_TRUE(back->newest_backup.has_value());
  EXPECT_EQ(back->newest_backup->id, "2026-11-24_10-00");
  EXPECT_EQ(back->newest_backup->committed, 1795000060);
  EXPECT_EQ(back->backup_error, r.backup_error);
  ASSERT_TRUE(back->backup_task.has_value());
  EXPECT_EQ(back->backup_task->part, 3);
  EXPECT_EQ(back->backup_task->step, 40);
  auto bare = ReplicatedReply::FromJson(json{{"watermark", -1}});
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->backup_task.has_value());
  EXPECT_FALSE(bare->newest_backup.has_value());
  json broken = Sent(r);
  broken["backup_task"]["part"] = -2;
  EXPECT_EQ(ReplicatedReply::FromJson(broken).status().code(), StatusCode::kInvalidArgument);
  broken = Sent(r);
  broken["watermark"] = "40";
  EXPECT_EQ(ReplicatedReply::FromJson(broken).status().code(), StatusCode::kInvalidArgument);
}

// The status answer, full and minimal, survives ToJson/FromJson; the JSON
// keeps the field names `strata status --json` has always printed.
TEST(WireControlTest, AStatusReplyRoundTrips) {
  StatusReply full;
  full.local_dir = "/dev/shm/ckpt";
  full.address = "10.0.0.7:7701";
  full.steps = {{"job1", 3, 1200, 1u << 20, "00ff00ff00ff00ff"}};
  full.ram_bytes = 5u << 20;
  full.tmpfs = true;
  full.huge = "within_size";
  full.watermark = 1100;
  full.newest_replicated = 1200;
  full.newest_ingested = 1200;
  full.last_restore = "step 1100 from node 2";
  full.restored_step = 1100;
  full.queued = 1;
  full.replication_lag_seconds = 0.25;
  full.job = StatusReply::Job{"job1", 3, 8, {5, 7}, 4};
  BackupStatus b;
  b.url = "s3://bucket/prefix";
  b.access = "ok";
  b.uploading = "b-9 part 3";
  b.newest = ReplicatedReply::Backup{"b-8", 1000, 1700000000, 1700000100};
  b.lag_seconds = 42;
  full.backup = b;
  full.ranks = {{4242, 1201, 1, 1200, 2.5, 12}};
  Goodput g;
  g.elapsed_seconds = 100;
  g.productive_seconds = 90;
  g.save_seconds = 4;
  g.restore_seconds = 3;
  g.wasted_seconds = 2;
  g.other_seconds = 1;
  g.goodput = 0.9;
  g.step = 1201;
  g.wasted_steps = 20;
  g.interruptions = 1;
  full.goodput = g;
  full.training_step = 1201;
  full.ondemand_step = 1200;
  full.maintenance_since = "2026-11-24T10:00:00Z";
  full.restore_state = "awaiting plan";
  const json j = Sent(full);
  EXPECT_EQ(j["ram_disk"]["huge"], "within_size");
  EXPECT_EQ(j["backup"]["backup_lag_seconds"], 42);
  EXPECT_EQ(j["job"], "job1");
  auto back = StatusReply::FromJson(json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), j);
  EXPECT_EQ(back->job->peers, (std::vector<int>{5, 7}));
  EXPECT_EQ(back->backup->newest->committed, 1700000100);
  EXPECT_EQ(back->restore_state, "awaiting plan");
  EXPECT_EQ(back->ranks[0].save_stall_seconds, 2.5);
  EXPECT_EQ(back->goodput->wasted_steps, 20);
  EXPECT_EQ(back->goodput->goodput, 0.9);

  const json minimal = StatusReply().ToJson();
  EXPECT_FALSE(minimal.contains("job"));
  EXPECT_FALSE(minimal.contains("backup"));
  EXPECT_FALSE(minimal.contains("restore_state"));  // before the first restore
  EXPECT_FALSE(minimal.contains("goodput"));        // before the job's first start
  auto empty = StatusReply::FromJson(json::parse(minimal.dump()));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_FALSE(empty->job);
  EXPECT_EQ(empty->newest_ingested, -1);
}

TEST(WireControlTest, AMalformedStatusOrHealthNamesTheField) {
  json j = StatusReply().ToJson();
  j["newest_ingested"] = "12";
  auto bad = StatusReply::FromJson(j);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"newest_ingested\""), std::string::npos)
      << bad.status().ToString();
  j = StatusReply().ToJson();
  j["steps"] =
      json::array({{{"job", "j"}, {"rank", 0}, {"step", 1}, {"bytes", -5}, {"digest", ""}}});
  bad = StatusReply::FromJson(j);
  EXPECT_NE(bad.status().message().find("\"bytes\""), std::string::npos) << bad.status().ToString();
  j = StatusReply().ToJson();
  j.erase("address");
  EXPECT_NE(StatusReply::FromJson(j).status().message().find("\"address\" is missing"),
            std::string::npos);

  auto health = HealthReply::FromJson({{"healthy", true}, {"description", "fine"}});
  ASSERT_TRUE(health.ok());
  EXPECT_TRUE(health->healthy);
  EXPECT_FALSE(health->maintenance.has_value());
  MaintenanceEvent e;
  e.time = "2026-11-24T10:00:00.000Z";
  e.unix_ms = 1795000000000;
  e.origin = "strata maintenance";
  e.grace_ms = 60000;
  e.lose_ram = true;
  e.ranks = 2;
  e.ranks_exited_seconds = 1.5;
  e.sync_step = 1200;
  e.saved = e.replicated = e.wiped = true;
  e.seconds = 3.25;
  auto event = HealthReply::FromJson(json::parse(HealthReply{true, "d", e}.ToJson().dump()));
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  ASSERT_TRUE(event->maintenance);
  EXPECT_EQ(event->maintenance->ToJson(), Sent(e));
  EXPECT_EQ(*event->maintenance->sync_step, 1200);
  json partial = Sent(e);
  partial.erase("saved");
  auto bad_event =
      HealthReply::FromJson({{"healthy", true}, {"description", "d"}, {"maintenance", partial}});
  EXPECT_NE(bad_event.status().message().find("\"saved\" is missing"), std::string::npos)
      << bad_event.status().ToString();
  EXPECT_FALSE(HealthReply::FromJson({{"description", "d"}}).ok());
  EXPECT_FALSE(HealthReply::FromJson({{"healthy", 1}, {"description", "d"}}).ok());
}

TEST(WireControlTest, MaintenanceAndQuarantineRequests) {
  auto defaults = MaintenanceRequest::FromJson(Request(Op::kMaintenance));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->grace, std::chrono::minutes(5));
  EXPECT_FALSE(defaults->lose_ram);
  MaintenanceRequest m;
  m.grace = std::chrono::seconds(90);
  m.lose_ram = true;
  auto back = MaintenanceRequest::FromJson(Sent(m));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->grace, std::chrono::seconds(90));
  EXPECT_TRUE(back->lose_ram);
  json day = Sent(m);
  day["grace_ms"] = int64_t{25} * 3600 * 1000;
  EXPECT_NE(MaintenanceRequest::FromJson(day).status().message().find("not within 0..24 h"),
            std::string::npos);
  day["grace_ms"] = "60s";
  EXPECT_NE(MaintenanceRequest::FromJson(day).status().message().find("\"grace_ms\""),
            std::string::npos);

  auto q = QuarantineRequest::FromJson(QuarantineRequest{40}.ToJson());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->step, 40);
  EXPECT_NE(QuarantineRequest::FromJson(Request(Op::kQuarantine))
                .status()
                .message()
                .find("\"step\" is missing"),
            std::string::npos);
  auto answer = QuarantineStepReply::FromJson(QuarantineStepReply{"never again"}.ToJson());
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->description, "never again");

  auto restart =
      SupervisorRestartRequest::FromJson(SupervisorRestartRequest{"planned", 75}.ToJson());
  ASSERT_TRUE(restart.ok()) << restart.status().ToString();
  EXPECT_EQ(restart->reason, "planned");
  EXPECT_EQ(restart->exit_code, 75);
  EXPECT_EQ(KindOf(Op::kSupervisorRestart), OpKind::kControl);
  json bored = SupervisorRestartRequest{"bored", 1}.ToJson();
  EXPECT_NE(SupervisorRestartRequest::FromJson(bored).status().message().find(
                "unknown reason \"bored\" (failed, planned or quarantined)"),
            std::string::npos);
  bored.erase("exit_code");
  EXPECT_NE(
      SupervisorRestartRequest::FromJson(bored).status().message().find("\"exit_code\" is missing"),
      std::string::npos);
}

TEST(WireCoordinationTest, RegisterAndReadyAnswersRoundTrip) {
  auto reg = RegisterReply::FromJson(RegisterReply{7}.ToJson());
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->round, 7);
  EXPECT_FALSE(RegisterReply::FromJson(json{{"round", "7"}}).ok());

  ReadyReply go;
  go.go = true;
  SyncDecision d;
  d.generation = 4;
  d.round = 7;
  d.step = 120;
  go.sync = d;
  auto back = ReadyReply::FromJson(json::parse(Sent(go).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->go);
  ASSERT_TRUE(back->sync);
  EXPECT_EQ(*back->sync->step, 120);
  auto replan = ReadyReply::FromJson(json{{"replan", true}});
  ASSERT_TRUE(replan.ok());
  EXPECT_TRUE(replan->replan);
  EXPECT_FALSE(replan->sync);
  EXPECT_NE(ReadyReply::FromJson(json::object()).status().message().find("neither go nor replan"),
            std::string::npos);
  EXPECT_FALSE(ReadyReply::FromJson(json{{"go", 1}}).ok());

  // Built in C++ from signed numbers, a decision's counters are signed JSON
  // integers: accepted as they are once parsed from text.
  json signed_sync = Sent(d);
  signed_sync["generation"] = int64_t{4};
  signed_sync["collect"] = int64_t{0};
  auto taken = SyncDecision::FromJson(signed_sync);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->generation, 4u);
  signed_sync["generation"] = int64_t{-1};
  EXPECT_FALSE(SyncDecision::FromJson(signed_sync).ok());
}

// A list reader names the entry it could not read (counted from 0).
TEST(WireTest, AListReaderNamesTheBadEntry) {
  json copies = {{"op", "add_copies"},
                 {"job", "j"},
                 {"round", 1},
                 {"node", 0},
                 {"inventory", {{0, 1, "0000000000000001"}, {0, "x", "0000000000000002"}}}};
  auto add = AddCopiesRequest::FromJson(copies);
  ASSERT_FALSE(add.ok());
  EXPECT_NE(add.status().message().find("\"inventory\" must be a list of [rank, step, "
                                        "\"digest\"] (entry 1 is not one)"),
            std::string::npos)
      << add.status().ToString();
  auto reply = ShardReply::FromJson(json::parse(
      R"j({"ok":true,"length":1,"xxh3":"0000000000000001","contributions":[)j"
      R"j({"rank":0,"chunk":0,"length":1,"xxh3":"0000000000000001","digest":"0000000000000001"},)j"
      R"j({"rank":1,"chunk":0,"length":1,"xxh3":"0000000000000001"}]})j"));
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find(
                "\"contributions\": entry 1: a contribution: \"digest\" is missing"),
            std::string::npos)
      << reply.status().ToString();
}

}  // namespace
}  // namespace strata::wire
