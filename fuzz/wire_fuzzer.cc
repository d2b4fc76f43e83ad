// Copyright 2026 The Strata Authors.
//
// Every message an agent reads from another agent, the library or the CLI:
// the input is parsed as JSON and handed to every message's FromJson, the
// operation parser, the step key, the error reply and the coded tier's
// helpers. None may throw, crash or read out of bounds; a message that
// parses must survive ToJson -> FromJson -> ToJson unchanged (what an agent
// sends, another agent of the same release must read back as sent).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "wire/coded.h"
#include "wire/control.h"
#include "wire/coordination.h"
#include "wire/data.h"
#include "wire/json.h"
#include "wire/op.h"

namespace {

using nlohmann::json;
using namespace strata;  // NOLINT(build/namespaces): the message list below

template <typename M>
void RoundTrip(const json& j, const char* name) {
  auto m = M::FromJson(j);
  if (!m.ok()) return;
  const json sent = m->ToJson();
  auto back = M::FromJson(sent);
  if (!back.ok()) {
    std::fprintf(stderr, "%s: its own ToJson does not parse: %s\n%s\n", name,
                 back.status().ToString().c_str(), sent.dump().c_str());
    std::abort();
  }
  if (back->ToJson() != sent) {
    std::fprintf(stderr, "%s: ToJson -> FromJson -> ToJson changed\n%s\n%s\n", name,
                 sent.dump().c_str(), back->ToJson().dump().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
#define STRATA_FUZZ_MESSAGE(M) RoundTrip<wire::M>(j, #M);
  // coordination.h
  STRATA_FUZZ_MESSAGE(RegisterRequest)
  STRATA_FUZZ_MESSAGE(AwaitPlanRequest)
  STRATA_FUZZ_MESSAGE(ReadyRequest)
  STRATA_FUZZ_MESSAGE(ReplicatedRequest)
  STRATA_FUZZ_MESSAGE(BackupDoneRequest)
  STRATA_FUZZ_MESSAGE(NodeAddressRequest)
  STRATA_FUZZ_MESSAGE(NoticeRequest)
  STRATA_FUZZ_MESSAGE(SyncRequest)
  STRATA_FUZZ_MESSAGE(QuarantineStepRequest)
  STRATA_FUZZ_MESSAGE(AddCopiesRequest)
  STRATA_FUZZ_MESSAGE(SyncDecision)
  STRATA_FUZZ_MESSAGE(RegisterReply)
  STRATA_FUZZ_MESSAGE(ReadyReply)
  STRATA_FUZZ_MESSAGE(ReplicatedReply)
  STRATA_FUZZ_MESSAGE(PlanReply)
  // data.h
  STRATA_FUZZ_MESSAGE(PutStepRequest)
  STRATA_FUZZ_MESSAGE(PutStepReady)
  STRATA_FUZZ_MESSAGE(PutFilesRequest)
  STRATA_FUZZ_MESSAGE(GetIndexRequest)
  STRATA_FUZZ_MESSAGE(FetchStepRequest)
  STRATA_FUZZ_MESSAGE(IndexReply)
  // coded.h
  STRATA_FUZZ_MESSAGE(PutShardRequest)
  STRATA_FUZZ_MESSAGE(PutShardReady)
  STRATA_FUZZ_MESSAGE(GetShardRequest)
  STRATA_FUZZ_MESSAGE(ShardReply)
  // control.h
  STRATA_FUZZ_MESSAGE(BackupStatus)
  STRATA_FUZZ_MESSAGE(Goodput)
  STRATA_FUZZ_MESSAGE(StatusReply)
  STRATA_FUZZ_MESSAGE(MaintenanceRequest)
  STRATA_FUZZ_MESSAGE(MaintenanceEvent)
  STRATA_FUZZ_MESSAGE(HealthReply)
  STRATA_FUZZ_MESSAGE(QuarantineRequest)
  STRATA_FUZZ_MESSAGE(QuarantineStepReply)
  STRATA_FUZZ_MESSAGE(SupervisorRestartRequest)
#undef STRATA_FUZZ_MESSAGE
  wire::ParseOp(j).status().IgnoreError();
  wire::StepKeyFromJson(j).status().IgnoreError();
  wire::StatusFromJson(j, "fuzz").IgnoreError();
  wire::GroupFromJson(j, "fuzz").status().IgnoreError();
  wire::HeldParityFromJson(j, "fuzz").status().IgnoreError();
  wire::DecodeFromJson(j, "fuzz").status().IgnoreError();
  return 0;
}
