// Copyright 2026 The Strata Authors.
#include "wire/op.h"

#include <array>
#include <string>

namespace strata::wire {
namespace {

struct Spec {
  Op op;
  const char* name;
  OpKind kind;
};

// In enum order (checked by OpName's index).
constexpr std::array kSpecs = {
    Spec{Op::kRegister, "register", OpKind::kCoordination},
    Spec{Op::kAwaitPlan, "await_plan", OpKind::kCoordination},
    Spec{Op::kReady, "ready", OpKind::kCoordination},
    Spec{Op::kReplicated, "replicated", OpKind::kCoordination},
    Spec{Op::kBackupDone, "backup_done", OpKind::kCoordination},
    Spec{Op::kNodeAddress, "node_address", OpKind::kCoordination},
    Spec{Op::kNotice, "notice", OpKind::kCoordination},
    Spec{Op::kSync, "sync", OpKind::kCoordination},
    Spec{Op::kQuarantineStep, "quarantine_step", OpKind::kCoordination},
    Spec{Op::kAddCopies, "add_copies", OpKind::kCoordination},
    Spec{Op::kGetIndex, "get_index", OpKind::kControl},
    Spec{Op::kStatus, "status", OpKind::kControl},
    Spec{Op::kHealth, "health", OpKind::kControl},
    Spec{Op::kSupervisorRestart, "supervisor_restart", OpKind::kControl},
    Spec{Op::kPutStep, "put_step", OpKind::kLong},
    Spec{Op::kPutFiles, "put_files", OpKind::kLong},
    Spec{Op::kFetchStep, "fetch_step", OpKind::kLong},
    Spec{Op::kMaintenance, "maintenance", OpKind::kLong},
    Spec{Op::kQuarantine, "quarantine", OpKind::kLong},
    Spec{Op::kPutShard, "put_shard", OpKind::kLong},
    Spec{Op::kGetShard, "get_shard", OpKind::kLong},
};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    if (static_cast<size_t>(kSpecs[i].op) != i) return false;
  }
  return true;
}
static_assert(InEnumOrder(), "kSpecs must list the operations in enum order");
static_assert(kSpecs.size() == kOpCount, "kSpecs must list every operation");

const Spec& SpecOf(Op op) { return kSpecs[static_cast<size_t>(op)]; }

}  // namespace

const char* OpName(Op op) { return SpecOf(op).name; }

OpKind KindOf(Op op) { return SpecOf(op).kind; }

bool IsLongCall(std::string_view name) {
  std::optional<Op> op = OpFromName(name);
  return op && KindOf(*op) == OpKind::kLong;
}

std::optional<Op> OpFromName(std::string_view name) {
  for (const Spec& s : kSpecs) {
    if (s.name == name) return s.op;
  }
  return std::nullopt;
}

StatusOr<Op> ParseOp(const nlohmann::json& request) {
  auto it = request.is_object() ? request.find("op") : request.end();
  if (!request.is_object() || it == request.end() || !it->is_string()) {
    return InvalidArgumentError("a call needs an \"op\" string field");
  }
  const std::string& name = it->get_ref<const std::string&>();
  if (auto op = OpFromName(name)) return *op;
  return NotFoundError("unknown call \"" + name.substr(0, 32) + "\"");
}

nlohmann::json Request(Op op) { return {{"op", OpName(op)}}; }

bool IsNonNegativeInteger(const nlohmann::json& v) {
  return v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0);
}

}  // namespace strata::wire
