// Copyright 2026 The Strata Authors.
//
// JSON as the agents exchange it: parsing a peer's bytes with a bound on
// nesting, and a Status as a reply ({"ok": true} or {"ok": false, "code":
// C, "error": E}) and back.
#ifndef STRATA_WIRE_JSON_H_
#define STRATA_WIRE_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "strata/status.h"

namespace strata::wire {

using json = nlohmann::json;

// Parses JSON from a peer, dropping anything nested deeper than 32 levels
// (copying or printing a value recurses once per level). Never throws; a
// discarded value (is_discarded()) on a syntax error.
json ParseBounded(std::string_view text);

json StatusToJson(const Status& s);
// OK for {"ok": true}; otherwise the reply's code and error, the error
// prefixed with `peer`. A malformed reply is INTERNAL, never OK.
Status StatusFromJson(const json& reply, const std::string& peer);

}  // namespace strata::wire

#endif  // STRATA_WIRE_JSON_H_
