// Copyright 2026 The Strata Authors.
//
// JSON from another process (a peer's message, a backup's commit, a record
// on disk), parsed with its nesting bounded: copying, printing or
// destroying an nlohmann::json recurses once per level, so a hostile
// document could otherwise exhaust the stack of whoever touches it.
#ifndef STRATA_UTIL_JSON_BOUNDED_H_
#define STRATA_UTIL_JSON_BOUNDED_H_

#include <nlohmann/json.hpp>
#include <string_view>

namespace strata {

// Deeper than any document Strata writes (a backup commit with its index
// is the deepest, under 10 levels), shallow enough for any stack.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` whole or not at all: a syntax error, or any value nested
// deeper than kMaxJsonDepth, gives a discarded value (is_discarded(), and
// no object), never a document with the deep parts left out, which could
// read as a valid one that lacks them. Never throws.
inline nlohmann::json ParseBounded(std::string_view text) {
  bool too_deep = false;
  nlohmann::json::parser_callback_t shallow = [&too_deep](int depth, nlohmann::json::parse_event_t,
                                                          nlohmann::json&) {
    too_deep |= depth > kMaxJsonDepth;
    return !too_deep;
  };
  nlohmann::json doc = nlohmann::json::parse(text, shallow, /*allow_exceptions=*/false);
  return too_deep ? nlohmann::json(nlohmann::json::value_t::discarded) : doc;
}

}  // namespace strata

#endif  // STRATA_UTIL_JSON_BOUNDED_H_
