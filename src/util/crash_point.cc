// Copyright 2026 The Strata Authors.
#include "util/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace strata {
namespace {

struct Target {
  std::string name;  // empty: no crash point armed
  long hit = 1;
  std::atomic<long> seen{0};
};

Target* LoadTarget() {
  auto* t = new Target();  // process lifetime
  const char* spec = std::getenv("STRATA_CRASH_AT");
  if (spec == nullptr || *spec == '\0') return t;
  std::string s(spec);
  auto colon = s.rfind(':');
  if (colon != std::string::npos) {
    t->hit = std::max(1L, std::strtol(s.c_str() + colon + 1, nullptr, 10));
    s.resize(colon);
  }
  t->name = s;
  return t;
}

}  // namespace

void CrashPoint(const char* name) {
  static Target* target = LoadTarget();
  if (target->name.empty() || target->name != name) return;
  if (target->seen.fetch_add(1) + 1 == target->hit) ::kill(::getpid(), SIGKILL);
}

}  // namespace strata
