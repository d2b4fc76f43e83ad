// Copyright 2026 The Strata Authors.
//
// The names the agent and the library read from directory listings, which
// anyone who can write the local directory (or a peer's step) controls:
// step, data-file, quarantine and worker-file (marker, save) names, job and
// item names. Each must parse or be refused, never crash; a name that parses
// is the canonical name of what it parsed to, so two spellings never name
// one step.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "format/naming.h"

namespace {

void Check(bool ok, const char* what, std::string_view name) {
  if (ok) return;
  std::fprintf(stderr, "%s: \"%.*s\"\n", what, static_cast<int>(name.size()), name.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;  // NOLINT(build/namespaces)
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  if (auto step = ParseStepDirName(name)) {
    Check(*step >= 0 && StepDirName(*step) == name, "a step name that is not canonical", name);
    Check(!IsTempName(name) && !ParseQuarantineDirName(name), "a step name of two kinds", name);
  }
  if (auto index = ParseDataFileName(name)) {
    Check(DataFileName(*index) == name, "a data file name that is not canonical", name);
  }
  if (auto step = ParseQuarantineDirName(name)) {
    Check(*step >= 0 && !ParseStepDirName(name), "a quarantine name that parses as a step", name);
  }
  for (std::string_view suffix : {std::string_view(".restore"), std::string_view(".save")}) {
    if (auto w = ParseWorkerFileName(name, suffix)) {
      Check(ValidateJobName(w->job).ok(), "a worker file of an invalid job", name);
      const std::string again = suffix == ".restore" ? MarkerName(*w) : SaveFileName(*w);
      Check(again == name, "a worker file name that is not canonical", name);
    }
  }
  ValidateJobName(name).IgnoreError();
  ValidateItemName(name).IgnoreError();
  return 0;
}
