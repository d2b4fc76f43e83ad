// Copyright 2026 The Strata Authors.
//
// JSON as the agents exchange it: a Status as a reply ({"ok": true} or
// {"ok": false, "code": C, "error": E}) and back. A peer's bytes are parsed
// with ParseBounded (util/json_bounded.h).
#ifndef STRATA_WIRE_JSON_H_
#define STRATA_WIRE_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::wire {

using json = nlohmann::json;

json StatusToJson(const Status& s);
// OK for {"ok": true}; otherwise the reply's code and error, the error
// prefixed with `peer`. A malformed reply is INTERNAL, never OK.
Status StatusFromJson(const json& reply, const std::string& peer);

}  // namespace strata::wire

#endif  // STRATA_WIRE_JSON_H_
