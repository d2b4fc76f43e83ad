// Copyright 2026 The Strata Authors.
#include "wire/json.h"

namespace strata::wire {

json StatusToJson(const Status& s) {
  if (s.ok()) return {{"ok", true}};
  return {{"ok", false}, {"code", static_cast<int>(s.code())}, {"error", s.message()}};
}

Status StatusFromJson(const json& reply, const std::string& peer) {
  auto ok = reply.find("ok");
  if (ok != reply.end() && ok->is_boolean() && ok->get<bool>()) return Status::Ok();
  // A code that is no known status code (or no integer) is INTERNAL; an
  // error that is no string is "malformed reply".
  int code = static_cast<int>(StatusCode::kInternal);
  auto c = reply.find("code");
  if (c != reply.end() && c->is_number_integer() && c->get<int64_t>() > 0 &&
      c->get<int64_t>() <= static_cast<int>(StatusCode::kInternal)) {
    code = static_cast<int>(c->get<int64_t>());
  }
  auto e = reply.find("error");
  std::string msg = e != reply.end() && e->is_string() ? e->get<std::string>() : "malformed reply";
  return Status(static_cast<StatusCode>(code), peer + ": " + msg);
}

}  // namespace strata::wire
