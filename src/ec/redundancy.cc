// Copyright 2026 The Strata Authors.
#include "ec/redundancy.h"

#include <charconv>
#include <vector>

namespace strata::ec {
namespace {

// "name(a,b,...)" -> the integers; nullopt when the text has another shape.
std::optional<std::vector<int>> Arguments(std::string_view text, std::string_view name) {
  if (!text.starts_with(name) || text.size() < name.size() + 2 || text.back() != ')' ||
      text[name.size()] != '(') {
    return std::nullopt;
  }
  std::string_view rest = text.substr(name.size() + 1, text.size() - name.size() - 2);
  std::vector<int> out;
  for (;;) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) return std::nullopt;
    out.push_back(v);
    if (comma == std::string_view::npos) return out;
    rest.remove_prefix(comma + 1);
  }
}

}  // namespace

StatusOr<Redundancy> Redundancy::Parse(std::string_view text) {
  const std::string quoted = "redundancy \"" + std::string(text.substr(0, 64)) + "\": ";
  Redundancy r;
  if (text == "copies") return r;
  if (text == "xor") text = "xor(8)";
  if (auto a = Arguments(text, "xor")) {
    if (a->size() != 1 || (*a)[0] < 2 || (*a)[0] > kMaxGroupSize) {
      return InvalidArgumentError(quoted + "xor(N) needs one set size N in 2..255");
    }
    r.kind = Kind::kXor;
    r.k = (*a)[0] - 1;
    r.m = 1;
    return r;
  }
  if (auto a = Arguments(text, "rs")) {
    if (a->size() != 2 || (*a)[0] < 1 || (*a)[1] < 1 || (*a)[0] + (*a)[1] > kMaxGroupSize) {
      return InvalidArgumentError(quoted + "rs(K,M) needs K >= 1 data and M >= 1 parity shards, " +
                                  "K + M <= 255");
    }
    r.kind = Kind::kRs;
    r.k = (*a)[0];
    r.m = (*a)[1];
    return r;
  }
  return InvalidArgumentError(quoted + "expected copies, xor, xor(N) or rs(K,M)");
}

std::string Redundancy::ToString() const {
  switch (kind) {
    case Kind::kCopies:
      return "copies";
    case Kind::kXor:
      return "xor(" + std::to_string(k + 1) + ")";
    case Kind::kRs:
      return "rs(" + std::to_string(k) + "," + std::to_string(m) + ")";
  }
  return "unknown";
}

double Redundancy::RamFactor(int peers) const {
  if (!coded()) return 1.0 + peers;
  return 1.0 + static_cast<double>(m) / k;
}

}  // namespace strata::ec
