// Copyright 2026 The Strata Authors.
//
// The operations of the agent protocol: every call an agent, `strata`
// command or bench sends is one of these, named on the wire by its "op"
// field. Receivers parse the name once, at the edge, and dispatch through
// a table of handlers indexed by the enum (op_table.h); senders name calls through OpName, so a
// name exists in one place.
//
// Three kinds, by who answers and how:
//   coordination  the coordinator's node; may park until a round moves on
//   control       any agent, at once, on the server's workers
//   long          any agent; the call takes the connection (data follows
//                 the request or the reply) on a thread of its own
//
// Changing a call incompatibly bumps net::kProtocolVersion (net/auth.h):
// agents of different versions refuse each other at the handshake.
#ifndef STRATA_WIRE_OP_H_
#define STRATA_WIRE_OP_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "strata/status.h"

namespace strata::wire {

enum class Op {
  // Coordination.
  kRegister,        // a node's incarnation and inventory; joins or starts a round
  kAwaitPlan,       // waits for the round's restore plan
  kReady,           // the node's result for the plan; waits for "go" or a replan
  kReplicated,      // the node's newest fully replicated step; answers the watermark
  kBackupDone,      // a node's part of a backup uploaded (or failed)
  kNodeAddress,     // where a node of the job listens
  kNotice,          // a maintenance notice reached a node
  kSync,            // a node's progress; waits for the on-demand step decision
  kQuarantineStep,  // never restore this step of the job again
  kAddCopies,       // copies that arrived while the node waits for a plan
  // Control.
  kGetIndex,           // a held step's index
  kStatus,             // what `strata status` shows
  kHealth,             // what `strata health` shows
  kSupervisorRestart,  // `strata run --agent` restarts the training command
  // Long.
  kPutStep,      // a peer sends a step (its index, then files on the connection)
  kPutFiles,     // more files of a put_step, on another connection
  kFetchStep,    // a restoring node fetches a step (files follow the reply)
  kMaintenance,  // `strata maintenance`: runs the whole event
  kQuarantine,   // `strata run --agent` found a crash loop on a step
  kPutShard,     // a group member's chunk for a parity row this agent holds (coded tier)
  kGetShard,     // a decoding node reads a member's chunk or a parity row (coded tier)
};

// How many operations there are (the last one's value + 1).
inline constexpr size_t kOpCount = static_cast<size_t>(Op::kGetShard) + 1;

enum class OpKind { kCoordination, kControl, kLong };

const char* OpName(Op op);  // a string literal
OpKind KindOf(Op op);
std::optional<Op> OpFromName(std::string_view name);
// Whether `name` is a long call (takes the connection's socket): what a
// Server asks of its handlers.
bool IsLongCall(std::string_view name);

// The request's operation. INVALID_ARGUMENT when "op" is missing or not a
// string; NOT_FOUND naming it (cut to 32 bytes) when no operation has that
// name.
StatusOr<Op> ParseOp(const nlohmann::json& request);

// A request of `op` with no other field yet: {"op": "<name>"}.
nlohmann::json Request(Op op);

// A JSON integer >= 0. Parsed from text such a number is unsigned; built in
// C++ from a signed type it is signed: every message accepts both.
bool IsNonNegativeInteger(const nlohmann::json& v);

}  // namespace strata::wire

#endif  // STRATA_WIRE_OP_H_
