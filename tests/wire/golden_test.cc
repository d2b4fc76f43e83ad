// Copyright 2026 The Strata Authors.
//
// Golden JSON: the bytes every message puts on the wire today, pinned, so
// that a change to a codec cannot silently break agents of the previous
// release. Each message is built with every field set (and once with only
// what is required) and its ToJson() must be exactly the recorded text; the
// recorded text must parse (FromJson) back into a message that writes the
// same text again. A deliberate change to the protocol changes these texts
// and bumps net::kProtocolVersion (wire/op.h).
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

#include "test_util.h"
#include "wire/coded.h"
#include "wire/control.h"
#include "wire/coordination.h"
#include "wire/data.h"

namespace strata::wire {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

StepKey Key() { return {"job-a", 3, 120}; }

StepIndex Index() {
  StepIndex index;
  index.strata = false;
  index.digest = 0x0123456789abcdefull;
  index.files = {{"a/data.bin", 20, {0x1111, 0x2222}}, {"b.txt", 5, {0x3333}}};
  index.files[0].size = 17ull << 20;  // two chunks
  index.total_bytes = index.files[0].size + index.files[1].size;
  return index;
}

ec::Group Group() {
  ec::Group g;
  g.members = {0, 1, 2, 3};
  g.kind = ec::Redundancy::Kind::kRs;
  g.m = 2;
  return g;
}

// Every field of M, in a message where every field is set: missing,
// mistyped, out of its range, and beside a field M does not know.
// A refusal is INVALID_ARGUMENT (DATA_LOSS for a step index) and names
// the field; a field that is not required may be left out; an unknown
// field is ignored.
// The fields of each message (by type) some sample has fed malformed input.
std::map<std::string, std::set<std::string>>& Covered() {
  static std::map<std::string, std::set<std::string>> covered;
  return covered;
}

template <typename M>
void ExpectMalformedRefused(const M& m, int line = __builtin_LINE()) {
  SCOPED_TRACE(::testing::Message() << "golden_test.cc:" << line);
  const json full = m.ToJson();
  std::set<std::string>& covered = Covered()[typeid(M).name()];
  auto refused = [](const json& j, const std::string& key) {
    StatusOr<M> r = M::FromJson(j);
    ASSERT_FALSE(r.ok()) << key << ": " << j.dump();
    EXPECT_TRUE(r.status().code() == StatusCode::kInvalidArgument ||
                r.status().code() == StatusCode::kDataLoss)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("\"" + key + "\""), std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find(M::Fields().name()), std::string::npos)
        << r.status().ToString();
  };
  // Advisory by design: a value that is not a positive integer is ignored.
  static const std::set<std::string> kAdvisory = {"backup_interval_steps",
                                                  "backup_interval_minutes", "workers_per_node"};
  ASSERT_FALSE(M::Fields().fields().empty());
  for (const FieldInfo& f : M::Fields().fields()) {
    SCOPED_TRACE(f.key);
    if (!full.contains(f.key)) continue;  // another sample sets it
    covered.insert(f.key);
    json j = full;
    j.erase(f.key);
    if (f.required) {
      refused(j, f.key);
    } else if (StatusOr<M> r = M::FromJson(j); !r.ok()) {
      // Another field needs it (a fetch's files need a digest; put_files
      // without a group needs files): a clear error all the same.
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
      EXPECT_NE(r.status().message().find(M::Fields().name()), std::string::npos)
          << r.status().ToString();
    }
    if (kAdvisory.count(f.key)) continue;
    std::vector<json> wrong;
    switch (f.kind) {
      case FieldInfo::Kind::kInteger:
        wrong = {json("7"), json(1.5), json::array()};
        if (f.lo > std::numeric_limits<int64_t>::min()) wrong.push_back(f.lo - 1);
        if (f.hi < std::numeric_limits<int64_t>::max()) wrong.push_back(f.hi + 1);
        if (f.hi < (int64_t{1} << 40)) wrong.push_back(int64_t{1} << 40);
        if (!f.any_uint64) wrong.push_back(std::numeric_limits<uint64_t>::max());
        break;
      case FieldInfo::Kind::kText:
        wrong = {json(7), json::object(), json(std::string(70000, 'x'))};
        break;
      case FieldInfo::Kind::kBool:
        wrong = {json("true"), json(1)};
        break;
      case FieldInfo::Kind::kNumber:
        wrong = {json("1.5"), json::array()};
        break;
      case FieldInfo::Kind::kOther:
        wrong = {json("x"), json::object({{"nested", json::object()}})};
        break;
    }
    for (const json& w : wrong) {
      j = full;
      j[f.key] = w;
      refused(j, f.key);
    }
  }
  json extra = full;
  extra["a_field_of_a_newer_release"] = {{"x", 1}};
  StatusOr<M> r = M::FromJson(extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ToJson(), full);
  EXPECT_FALSE(M::FromJson(json::array()).ok());
  EXPECT_FALSE(M::FromJson(json("text")).ok());
}

// The message's bytes are `golden`, and `golden` parses back into a
// message with the same bytes.
template <typename M>
void ExpectGolden(const M& m, const std::string& golden, int line = __builtin_LINE()) {
  SCOPED_TRACE(::testing::Message() << "golden_test.cc:" << line);
  const std::string sent = m.ToJson().dump();
  testing::SaveFuzzSeed("wire", sent);
  if (sent != golden) {
    ADD_FAILURE() << "the bytes of this message changed; they are now\nGOLDEN " << line << " "
                  << sent;
    return;
  }
  StatusOr<M> parsed = M::FromJson(json::parse(golden));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->ToJson().dump(), golden) << "the golden text does not round-trip";
  ExpectMalformedRefused(m, line);
}

void CoordinationRequests() {
  RegisterRequest reg;
  reg.job = "job-a";
  reg.node = 2;
  reg.nodes = 4;
  reg.dp = 2;
  reg.address = *net::ParseEndpoint("10.0.0.2:7701");
  reg.incarnation = "inc-7";
  reg.inventory = {{2, 100, 0xabc}, {1, 100, 0xdef}};
  reg.cadence = {10, 30, 2};
  reg.redundancy = *ec::Redundancy::Parse("rs(2,2)");
  reg.domain = "rack-1";
  reg.parity = {{100, Group(), 1, 0, {{0, 0xa}, {1, 0xb}}}};
  reg.quarantined = {90, 80};
  ExpectGolden(
      reg,
      R"j({"address":"10.0.0.2:7701","backup_interval_minutes":30,"backup_interval_steps":10,"domain":"rack-1","dp":2,"incarnation":"inc-7","inventory":[[2,100,"0000000000000abc"],[1,100,"0000000000000def"]],"job":"job-a","node":2,"nodes":4,"op":"register","parity":[{"digests":[[0,"000000000000000a"],[1,"000000000000000b"]],"group":{"code":"rs","m":2,"members":[0,1,2,3]},"row":0,"step":100,"stripe":1}],"quarantined":[80,90],"redundancy":"rs(2,2)","workers_per_node":2})j");
  RegisterRequest bare;
  bare.job = "job-a";
  bare.address = *net::ParseEndpoint("10.0.0.2:7701");
  ExpectGolden(
      bare,
      R"j({"address":"10.0.0.2:7701","dp":1,"inventory":[],"job":"job-a","node":0,"nodes":1,"op":"register"})j");

  AwaitPlanRequest await{"job-a", 4, 2, 1, {2, 3}, milliseconds(1500)};
  ExpectGolden(
      await,
      R"j({"job":"job-a","node":1,"op":"await_plan","peers":[2,3],"plan_version":2,"round":4,"wait_ms":1500})j");
  ExpectGolden(AwaitPlanRequest{"job-a", 4, 0, std::nullopt, {}, std::nullopt},
               R"j({"job":"job-a","op":"await_plan","plan_version":0,"round":4})j");

  ReadyRequest ready{"job-a",          4, 1, 2, true, {{2, 1, 100}, {3, kParityRank, 100}},
                     milliseconds(900)};
  ExpectGolden(
      ready,
      R"j({"bad":[[2,1,100],[3,-2,100]],"job":"job-a","node":1,"ok":true,"op":"ready","plan_version":2,"round":4,"wait_ms":900})j");

  ReplicatedRequest replicated{"job-a", 1, 100, 4, 2, {10, 30, 2}, {}, {}};
  ExpectGolden(
      replicated,
      R"j({"backup_interval_minutes":30,"backup_interval_steps":10,"dp":2,"job":"job-a","node":1,"nodes":4,"op":"replicated","step":100,"workers_per_node":2})j");
  ExpectGolden(ReplicatedRequest{"job-a", 1, -1, std::nullopt, std::nullopt, {}, {}, {}},
               R"j({"job":"job-a","node":1,"op":"replicated","step":-1})j");
  ReplicatedRequest requested{"job-a", 1, 100, 4, 2, {}, {40, 50}, {30}};
  ExpectGolden(
      requested,
      R"j({"dp":2,"job":"job-a","node":1,"nodes":4,"op":"replicated","requested":[40,50],"requested_missing":[30],"step":100})j");

  BackupDoneRequest done{"job-a", 1, "b-100", 1, 100, true, "", 4096, 0xfeed};
  ExpectGolden(
      done,
      R"j({"bytes":4096,"digest":"000000000000feed","id":"b-100","job":"job-a","node":1,"ok":true,"op":"backup_done","part":1,"step":100})j");
  BackupDoneRequest failed{"job-a", 1, "b-100", 1, 100, false, "disk full", 0, std::nullopt};
  ExpectGolden(
      failed,
      R"j({"bytes":0,"error":"disk full","id":"b-100","job":"job-a","node":1,"ok":false,"op":"backup_done","part":1,"step":100})j");
  BackupDoneRequest gone{"job-a",      1,   "b-100", 1, 100, false, "no step job-a/1/100", 0,
                         std::nullopt, true};
  ExpectGolden(
      gone,
      R"j({"bytes":0,"error":"no step job-a/1/100","id":"b-100","job":"job-a","node":1,"ok":false,"op":"backup_done","part":1,"step":100,"step_gone":true})j");

  ExpectGolden(NodeAddressRequest{"job-a", 3}, R"j({"job":"job-a","node":3,"op":"node_address"})j");
  ExpectGolden(NodeAddressRequest{std::nullopt, 3}, R"j({"node":3,"op":"node_address"})j");
  ExpectGolden(NoticeRequest{"job-a", 1, 99, "gce"},
               R"j({"job":"job-a","node":1,"op":"notice","origin":"gce","step":99})j");
  SyncRequest sync{"job-a", 1, 99, 2.5, 7, 3, milliseconds(2000), 4};
  ExpectGolden(
      sync,
      R"j({"collect":3,"generation":7,"job":"job-a","node":1,"op":"sync","rate":2.5,"round":4,"step":99,"wait_ms":2000})j");
  ExpectGolden(QuarantineStepRequest{"job-a", 1, 100},
               R"j({"job":"job-a","node":1,"op":"quarantine_step","step":100})j");
  ExpectGolden(
      AddCopiesRequest{"job-a", 4, 1, {{2, 100, 0xabc}}},
      R"j({"inventory":[[2,100,"0000000000000abc"]],"job":"job-a","node":1,"op":"add_copies","round":4})j");
}

void CoordinationReplies() {
  SyncDecision decided{7, 4, 3, true, 120, 1700000000000, 118, "gce"};
  ExpectGolden(
      decided,
      R"j({"collect":3,"collecting":true,"generation":7,"notice_step":118,"notice_unix_ms":1700000000000,"origin":"gce","round":4,"step":120})j");
  SyncDecision none;
  ExpectGolden(none, R"j({"collect":0,"collecting":false,"generation":0,"round":0,"step":null})j");

  ExpectGolden(RegisterReply{4}, R"j({"round":4})j");
  ExpectGolden(NodeAddressReply{"job-a", 3, "10.0.0.3:7701"},
               R"j({"address":"10.0.0.3:7701","job":"job-a","node":3})j");
  ExpectGolden(BackupDoneReply{true, std::nullopt, false}, R"j({"abandoned":true})j");
  ExpectGolden(BackupDoneReply{false, false, true}, R"j({"committed":false,"committing":true})j");
  ExpectGolden(BackupDoneReply{false, true, false}, R"j({"committed":true})j");
  ExpectGolden(AddCopiesReply{true}, R"j({"planned":true})j");
  ExpectGolden(AddCopiesReply{false}, R"j({"planned":false})j");
  ExpectGolden(
      ReadyReply{true, false, decided},
      R"j({"go":true,"sync":{"collect":3,"collecting":true,"generation":7,"notice_step":118,"notice_unix_ms":1700000000000,"origin":"gce","round":4,"step":120}})j");
  ExpectGolden(ReadyReply{false, true, std::nullopt}, R"j({"replan":true})j");

  ReplicatedReply replicated;
  replicated.watermark = 100;
  replicated.newest_backup = ReplicatedReply::Backup{"b-90", 90, 1700000000, 1700000100};
  replicated.backup_error = "denied";
  replicated.backup_task = ReplicatedReply::Task{"b-100", 100, 2};
  replicated.requested = {0, 120};
  ExpectGolden(
      replicated,
      R"j({"backup_error":"denied","backup_task":{"id":"b-100","part":2,"step":100},"newest_backup":{"committed":1700000100,"created":1700000000,"id":"b-90","step":90},"requested":[0,120],"watermark":100})j");
  ExpectGolden(ReplicatedReply{}, R"j({"watermark":-1})j");

  PlanReply plan;
  plan.round = 4;
  plan.plan_version = 2;
  plan.step = 100;
  plan.sources[0] = Source{0, {1, 2}, 0xabc, std::nullopt};
  plan.sources[1] = Source{1, {kBackupHolder}, 0xdef, std::nullopt};
  plan.sources[2] =
      Source{2, {3}, 0x123, DecodeSource{Group(), {{0, {{0, 0, 0}, {2, 3, kParityRank}}}}}};
  plan.addresses = {{0, "10.0.0.1:7701"}, {1, "10.0.0.2:7701"}};
  plan.reason = "newest complete step";
  plan.backup = "b-100";
  plan.discard_above = 100;
  plan.group = Group();
  plan.quarantined = {120};
  ExpectGolden(
      plan,
      R"j({"addresses":{"0":"10.0.0.1:7701","1":"10.0.0.2:7701"},"backup":"b-100","discard_above":100,"group":{"code":"rs","m":2,"members":[0,1,2,3]},"plan_version":2,"quarantined":[120],"reason":"newest complete step","round":4,"sources":{"0":{"digest":"0000000000000abc","holders":[1,2],"source_rank":0},"1":{"digest":"0000000000000def","holders":[-1],"source_rank":1},"2":{"decode":{"group":{"code":"rs","m":2,"members":[0,1,2,3]},"stripes":[[0,[[0,0,0],[2,3,-2]]]]},"digest":"0000000000000123","holders":[3],"source_rank":2}},"step":100})j");
  PlanReply refused;
  refused.round = 4;
  refused.error = "node 3 holds nothing";
  ExpectGolden(
      refused,
      R"j({"addresses":{},"error":"node 3 holds nothing","plan_version":0,"reason":"","round":4,"sources":{},"step":null})j");
}

void DataCalls() {
  PutStepRequest put;
  put.key = Key();
  put.index = Index();
  put.streams = 4;
  ExpectGolden(
      put,
      R"j({"index":{"digest":"0123456789abcdef","files":[{"chunks":["0000000000001111","0000000000002222"],"path":"a/data.bin","size":17825792},{"chunks":["0000000000003333"],"path":"b.txt","size":5}],"strata":false,"total_bytes":17825797},"key":{"job":"job-a","rank":3,"step":120},"op":"put_step","streams":4})j");
  PutStepRequest dedup = put;
  dedup.streams = 1;
  dedup.dedup = true;
  dedup.range_streams = 2;
  dedup.ranges = RangePlan{{{{0, 1 << 20, 0x77, 0, 0}}, {}}, {"w"}};
  ExpectGolden(
      dedup,
      R"j({"dedup":true,"index":{"digest":"0123456789abcdef","files":[{"chunks":["0000000000001111","0000000000002222"],"path":"a/data.bin","size":17825792},{"chunks":["0000000000003333"],"path":"b.txt","size":5}],"strata":false,"total_bytes":17825797},"key":{"job":"job-a","rank":3,"step":120},"op":"put_step","range_streams":2,"ranges":[[0,0,1048576,"0000000000000077"]],"streams":1})j");

  ExpectGolden(PutStepReady{true, std::nullopt, std::nullopt}, R"j({"have":true,"ok":true})j");
  PutStepReady need{false, 9, std::vector<std::vector<FileRange>>{{{0, 0, 4096}}, {{1, 0, 5}}}};
  ExpectGolden(need, R"j({"have":false,"need":[[[0,0,4096]],[[1,0,5]]],"ok":true,"transfer":9})j");

  ExpectGolden(PutFilesRequest{9, {0, 1}, std::nullopt},
               R"j({"files":[0,1],"op":"put_files","transfer":9})j");
  ExpectGolden(PutFilesRequest{9, {}, 1}, R"j({"group":1,"op":"put_files","transfer":9})j");
  ExpectGolden(GetIndexRequest{Key()},
               R"j({"key":{"job":"job-a","rank":3,"step":120},"op":"get_index"})j");
  ExpectGolden(
      FetchStepRequest{Key(), 0xabc, std::vector<size_t>{1}},
      R"j({"digest":"0000000000000abc","files":[1],"key":{"job":"job-a","rank":3,"step":120},"op":"fetch_step"})j");
  ExpectGolden(FetchStepRequest{Key(), std::nullopt, std::nullopt},
               R"j({"key":{"job":"job-a","rank":3,"step":120},"op":"fetch_step"})j");
  ExpectGolden(
      IndexReply{Index()},
      R"j({"index":{"digest":"0123456789abcdef","files":[{"chunks":["0000000000001111","0000000000002222"],"path":"a/data.bin","size":17825792},{"chunks":["0000000000003333"],"path":"b.txt","size":5}],"strata":false,"total_bytes":17825797},"ok":true})j");
}

void CodedCalls() {
  PutShardRequest put{Key(), 0xabc, Index(), Group(), 1, 0, 1, 4096, 0x77};
  ExpectGolden(
      put,
      R"j({"chunk":1,"digest":"0000000000000abc","group":{"code":"rs","m":2,"members":[0,1,2,3]},"index":{"digest":"0123456789abcdef","files":[{"chunks":["0000000000001111","0000000000002222"],"path":"a/data.bin","size":17825792},{"chunks":["0000000000003333"],"path":"b.txt","size":5}],"strata":false,"total_bytes":17825797},"key":{"job":"job-a","rank":3,"step":120},"length":4096,"op":"put_shard","row":0,"stripe":1,"xxh3":"0000000000000077"})j");
  ExpectGolden(PutShardReady{true}, R"j({"have":true,"ok":true})j");
  GetShardRequest get{Key(), 0xabc, Group(), true, 1, 0, 0, 2, true};
  ExpectGolden(
      get,
      R"j({"group":{"code":"rs","m":2,"members":[0,1,2,3]},"header_only":true,"index_of":2,"key":{"job":"job-a","rank":3,"step":120},"op":"get_shard","parity":true,"row":0,"stripe":1})j");
  GetShardRequest chunk{Key(), 0xabc, Group(), false, 0, 0, 1, std::nullopt, false};
  ExpectGolden(
      chunk,
      R"j({"chunk":1,"digest":"0000000000000abc","group":{"code":"rs","m":2,"members":[0,1,2,3]},"key":{"job":"job-a","rank":3,"step":120},"op":"get_shard","parity":false})j");
  ShardReply reply{4096, 0x77, {{1, 0, 4096, 0x66, 0xabc, Index()}}, Index()};
  ExpectGolden(
      reply,
      R"j({"contributions":[{"chunk":0,"digest":"0000000000000abc","length":4096,"rank":1,"xxh3":"0000000000000066"}],"index":{"digest":"0123456789abcdef","files":[{"chunks":["0000000000001111","0000000000002222"],"path":"a/data.bin","size":17825792},{"chunks":["0000000000003333"],"path":"b.txt","size":5}],"strata":false,"total_bytes":17825797},"length":4096,"ok":true,"xxh3":"0000000000000077"})j");
}

void ControlCalls() {
  StatusReply status;
  status.local_dir = "/dev/shm/node1";
  status.address = "10.0.0.2:7701";
  status.steps = {{"job-a", 1, 100, 4096, "0000000000000abc"}};
  status.ram_bytes = 8192;
  status.spare_bytes = 1024;
  status.parity_bytes = 2048;
  status.parity = {{100, 1, 0, 2048, true}};
  status.tmpfs = true;
  status.huge = "within_size";
  status.watermark = 90;
  status.newest_replicated = 100;
  status.newest_ingested = 100;
  status.last_restore = "restored step 80 from peer 2";
  status.restored_step = 80;
  status.restore_state = "done";
  status.queued = 1;
  status.replication_lag_seconds = 1.5;
  status.job = StatusReply::Job{"job-a", 1, 4, {2}, 4, "rs(2,2)", {0, 1, 2, 3}};
  BackupStatus backup;
  backup.url = "s3://bucket/prefix";
  backup.access = "ok";
  backup.uploading = "b-100 part 1";
  backup.last_error = "timeout";
  backup.job_error = "denied";
  backup.newest = ReplicatedReply::Backup{"b-90", 90, 1700000000, 1700000100};
  backup.lag_seconds = 60;
  status.backup = backup;
  status.ranks = {{4242, 100, 1, 98, 0.25, 12}};
  status.training_step = 101;
  status.ondemand_step = 98;
  status.maintenance_since = "2026-11-27T05:00:00Z";
  status.goodput = Goodput{100, 80, 5, 5, 5, 5, 0.8, 101, 3, 1};
  ExpectGolden(
      status,
      R"j({"address":"10.0.0.2:7701","backup":{"access":"ok","backup_lag_seconds":60,"job_error":"denied","last_error":"timeout","newest":{"committed":1700000100,"created":1700000000,"id":"b-90","step":90},"uploading":"b-100 part 1","url":"s3://bucket/prefix"},"goodput":{"elapsed_seconds":100.0,"goodput":0.8,"interruptions":1,"other_seconds":5.0,"productive_seconds":80.0,"restore_seconds":5.0,"save_seconds":5.0,"step":101,"wasted_seconds":5.0,"wasted_steps":3},"group":[0,1,2,3],"job":"job-a","last_restore":"restored step 80 from peer 2","local_dir":"/dev/shm/node1","maintenance_since":"2026-11-27T05:00:00Z","newest_ingested":100,"newest_replicated":100,"node":1,"nodes":4,"ondemand_step":98,"parity":[{"bytes":2048,"complete":true,"row":0,"step":100,"stripe":1}],"parity_bytes":2048,"peers":[2],"queued":1,"ram_bytes":8192,"ram_disk":{"huge":"within_size","tmpfs":true},"ranks":[{"notices":1,"ondemand_step":98,"pid":4242,"save_stall_seconds":0.25,"saves":12,"step":100}],"redundancy":"rs(2,2)","replication_lag_seconds":1.5,"restore_state":"done","restored_step":80,"round":4,"spare_bytes":1024,"steps":[{"bytes":4096,"digest":"0000000000000abc","job":"job-a","rank":1,"step":100}],"training_step":101,"watermark":90})j");
  ExpectGolden(
      StatusReply{},
      R"j({"address":"","last_restore":"","local_dir":"","newest_ingested":-1,"newest_replicated":-1,"parity_bytes":0,"queued":0,"ram_bytes":0,"ram_disk":{"huge":"","tmpfs":false},"ranks":[],"replication_lag_seconds":0.0,"restored_step":-1,"spare_bytes":0,"steps":[],"training_step":-1,"watermark":-1})j");

  ExpectGolden(MaintenanceRequest{milliseconds(60000), true, "gce"},
               R"j({"grace_ms":60000,"lose_ram":true,"op":"maintenance","origin":"gce"})j");
  MaintenanceEvent event{"2026-11-27T05:00:00Z",
                         1700000000000,
                         "gce",
                         60000,
                         true,
                         4,
                         1.5,
                         0,
                         98,
                         true,
                         true,
                         true,
                         12.5};
  ExpectGolden(
      HealthReply{false, "in maintenance", event},
      R"j({"description":"in maintenance","healthy":false,"maintenance":{"grace_ms":60000,"lose_ram":true,"origin":"gce","ranks":4,"ranks_exited_seconds":1.5,"ranks_killed":0,"replicated":true,"saved":true,"seconds":12.5,"sync_step":98,"time":"2026-11-27T05:00:00Z","unix_ms":1700000000000,"wiped":true}})j");
  ExpectGolden(HealthReply{true, "ok", std::nullopt}, R"j({"description":"ok","healthy":true})j");
  ExpectMalformedRefused(backup);
  ExpectMalformedRefused(*status.goodput);
  ExpectMalformedRefused(event);
  ExpectGolden(QuarantineRequest{100}, R"j({"op":"quarantine","step":100})j");
  ExpectGolden(QuarantineStepReply{"step 100 quarantined"},
               R"j({"description":"step 100 quarantined"})j");
  ExpectGolden(SupervisorRestartRequest{"failed", 1},
               R"j({"exit_code":1,"op":"supervisor_restart","reason":"failed"})j");
}

TEST(WireGoldenTest, CoordinationRequests) { CoordinationRequests(); }
TEST(WireGoldenTest, CoordinationReplies) { CoordinationReplies(); }
TEST(WireGoldenTest, DataCalls) { DataCalls(); }
TEST(WireGoldenTest, CodedCalls) { CodedCalls(); }
TEST(WireGoldenTest, ControlCalls) { ControlCalls(); }

// Every field of every message was fed malformed input by some sample.
template <typename M>
void ExpectEveryFieldCovered() {
  const std::set<std::string>& covered = Covered()[typeid(M).name()];
  for (const FieldInfo& f : M::Fields().fields()) {
    EXPECT_TRUE(covered.count(f.key))
        << M::Fields().name() << ": no sample sets \"" << f.key << "\"";
  }
}

TEST(WireGoldenTest, EveryFieldOfEveryMessageWasFedMalformedInput) {
  Covered().clear();
  CoordinationRequests();
  CoordinationReplies();
  DataCalls();
  CodedCalls();
  ControlCalls();
  ExpectEveryFieldCovered<RegisterRequest>();
  ExpectEveryFieldCovered<AwaitPlanRequest>();
  ExpectEveryFieldCovered<ReadyRequest>();
  ExpectEveryFieldCovered<ReplicatedRequest>();
  ExpectEveryFieldCovered<BackupDoneRequest>();
  ExpectEveryFieldCovered<NodeAddressRequest>();
  ExpectEveryFieldCovered<NoticeRequest>();
  ExpectEveryFieldCovered<SyncRequest>();
  ExpectEveryFieldCovered<QuarantineStepRequest>();
  ExpectEveryFieldCovered<AddCopiesRequest>();
  ExpectEveryFieldCovered<SyncDecision>();
  ExpectEveryFieldCovered<RegisterReply>();
  ExpectEveryFieldCovered<NodeAddressReply>();
  ExpectEveryFieldCovered<BackupDoneReply>();
  ExpectEveryFieldCovered<AddCopiesReply>();
  ExpectEveryFieldCovered<ReadyReply>();
  ExpectEveryFieldCovered<ReplicatedReply>();
  ExpectEveryFieldCovered<PlanReply>();
  ExpectEveryFieldCovered<PutStepRequest>();
  ExpectEveryFieldCovered<PutStepReady>();
  ExpectEveryFieldCovered<PutFilesRequest>();
  ExpectEveryFieldCovered<GetIndexRequest>();
  ExpectEveryFieldCovered<FetchStepRequest>();
  ExpectEveryFieldCovered<IndexReply>();
  ExpectEveryFieldCovered<PutShardRequest>();
  ExpectEveryFieldCovered<PutShardReady>();
  ExpectEveryFieldCovered<GetShardRequest>();
  ExpectEveryFieldCovered<ShardReply>();
  ExpectEveryFieldCovered<StatusReply>();
  ExpectEveryFieldCovered<BackupStatus>();
  ExpectEveryFieldCovered<Goodput>();
  ExpectEveryFieldCovered<MaintenanceRequest>();
  ExpectEveryFieldCovered<MaintenanceEvent>();
  ExpectEveryFieldCovered<HealthReply>();
  ExpectEveryFieldCovered<QuarantineRequest>();
  ExpectEveryFieldCovered<QuarantineStepReply>();
  ExpectEveryFieldCovered<SupervisorRestartRequest>();
}

}  // namespace
}  // namespace strata::wire
