// Copyright 2026 The Strata Authors.
//
// One handler per operation, indexed by Op (kSpecs' order, op.cc): what the
// agent and its coordinator serve calls with, instead of a switch each.
//
//   wire::OpTable<Answer(Done&)> table("coordination");
//   table.On<wire::ReadyRequest>(wire::Op::kReady,
//                                [this](const wire::ReadyRequest& r, Done& d) { ... });
//   Answer a = table.Serve(request, done);
//
// A handler bound with On<Request> sees only its typed request: a request
// that Request::FromJson refuses is answered with that error and reaches no
// handler. OnRaw hands the request over whole (to forward it). Serve answers
// an unknown "op" as ParseOp does and an operation with no handler here
// with NOT_FOUND naming it and the table. Tables are built once, before the
// first call, then only read (any thread).
#ifndef STRATA_WIRE_OP_TABLE_H_
#define STRATA_WIRE_OP_TABLE_H_

#include <array>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "strata/status.h"
#include "wire/op.h"

namespace strata::wire {

template <typename Signature>
class OpTable;

// R: what a handler returns, constructible from a Status (StatusOr<json>,
// or an optional of it for calls that may park). Args: the call's context
// (a completion, the connection's socket).
template <typename R, typename... Args>
class OpTable<R(Args...)> {
 public:
  using Handler = std::function<R(const nlohmann::json& request, Args... args)>;

  // `what` names the table in errors: "\"put_step\" is not a <what> call".
  explicit OpTable(std::string what) : what_(std::move(what)) {}

  // Serves `op` with handle(const Request&, Args...).
  template <typename Request, typename Handle>
  void On(Op op, Handle handle) {
    OnRaw(op, [handle = std::move(handle)](const nlohmann::json& request, Args... args) -> R {
      StatusOr<Request> r = Request::FromJson(request);
      if (!r.ok()) return R(r.status());
      return handle(*r, std::forward<Args>(args)...);
    });
  }

  // Serves `op` with handler(request, Args...): the request as it came.
  void OnRaw(Op op, Handler handler) { handlers_[static_cast<size_t>(op)] = std::move(handler); }

  R Serve(const nlohmann::json& request, Args... args) const {
    StatusOr<Op> op = ParseOp(request);
    if (!op.ok()) return R(op.status());
    const Handler& handler = handlers_[static_cast<size_t>(*op)];
    if (!handler) {
      return R(NotFoundError("\"" + std::string(OpName(*op)) + "\" is not a " + what_ + " call"));
    }
    return handler(request, std::forward<Args>(args)...);
  }

  bool Serves(Op op) const { return static_cast<bool>(handlers_[static_cast<size_t>(op)]); }

  // The operations of `kind` with no handler: none for a table that serves
  // the kind whole (what the tests of its owner check).
  std::vector<Op> Unserved(OpKind kind) const {
    std::vector<Op> missing;
    for (size_t i = 0; i < kOpCount; ++i) {
      const Op op = static_cast<Op>(i);
      if (KindOf(op) == kind && !Serves(op)) missing.push_back(op);
    }
    return missing;
  }

 private:
  std::string what_;
  std::array<Handler, kOpCount> handlers_;
};

}  // namespace strata::wire

#endif  // STRATA_WIRE_OP_TABLE_H_
