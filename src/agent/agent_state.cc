// Copyright 2026 The Strata Authors.
#include "agent/agent_state.h"

#include <nlohmann/json.hpp>

#include "backup/layout.h"
#include "format/naming.h"
#include "util/json_int.h"
#include "wire/coded.h"

namespace strata::agent {
namespace {

using json = nlohmann::json;

Framework FrameworkFromName(const std::string& name) {
  return name == "pytorch"               ? Framework::kPytorch
         : name == "pytorch.distributed" ? Framework::kPytorchDistributed
                                         : Framework::kOrbax;
}

// The fields of `j`, as EncodeAgentState writes them. Throws (json's
// errors, std::runtime_error) on anything else; the caller turns that into
// a status.
SavedState FromJson(const json& j, const std::string& path) {
  SavedState s;
  ReplicatorConfig& c = s.config;
  c.job_name = j.at("job").get<std::string>();
  Status named = ValidateJobName(c.job_name);
  if (!named.ok()) throw std::runtime_error(std::string(named.message()));
  c.framework = FrameworkFromName(j.at("framework").get<std::string>());
  c.node_rank = GetInt<int>(j.at("node"));
  c.nodes = GetInt<int>(j.at("nodes"));
  c.workers_per_node = GetInt<int>(j.at("workers"));
  c.assume_data_parallelism = GetInt<int>(j.at("dp"));
  if (!j.at("master").get<std::string>().empty()) c.master = j.at("master").get<std::string>();
  s.round = GetInt<int64_t>(j.at("round"));
  s.peers = GetInts<int>(j.at("peers"));
  for (const auto& [n, a] : j.at("addresses").items()) {
    s.addresses[std::stoi(n)] = a.get<std::string>();
  }
  if (j.contains("redundancy")) {  // a state file of this release
    StatusOr<ec::Redundancy> r = ec::Redundancy::Parse(j.at("redundancy").get<std::string>());
    if (!r.ok()) throw std::runtime_error(std::string(r.status().message()));
    s.redundancy = *r;
  }
  if (j.contains("group")) {
    StatusOr<ec::Group> g = wire::GroupFromJson(j.at("group"), path);
    if (!g.ok()) throw std::runtime_error(std::string(g.status().message()));
    s.group = *g;
  }
  if (j.contains("restored_step")) s.restored_step = GetInt<int64_t>(j.at("restored_step"));
  if (j.contains("quarantined")) {
    for (int64_t step : GetInts<int64_t>(j.at("quarantined"))) {
      if (step >= 0) s.quarantined.insert(step);
    }
  }
  return s;
}

}  // namespace

std::string EncodeAgentState(const SavedState& s) {
  const ReplicatorConfig& c = s.config;
  json addresses = json::object();
  for (const auto& [n, a] : s.addresses) addresses[std::to_string(n)] = a;
  json j = {{"job", c.job_name},
            {"framework", FrameworkName(c.framework)},
            {"node", c.node_rank},
            {"nodes", c.nodes},
            {"workers", c.workers_per_node},
            {"round", s.round},
            {"peers", s.peers},
            {"addresses", addresses},
            {"dp", c.assume_data_parallelism.value_or(1)},
            {"master", c.master.value_or("")},
            {"redundancy", s.redundancy.ToString()},
            // What replication must not go back below (Replication::Restored).
            {"restored_step", s.restored_step}};
  if (s.group) j["group"] = wire::GroupToJson(*s.group);
  // So that a restart of this agent and of the coordinator together does not
  // forget them (Restore::Quarantined).
  if (!s.quarantined.empty()) j["quarantined"] = s.quarantined;
  return j.dump();
}

StatusOr<SavedState> DecodeAgentState(std::string_view text, const std::string& path) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError(path + ": not a JSON object");
  try {
    return FromJson(j, path);
  } catch (const std::exception& e) {
    return InvalidArgumentError(path + ": " + e.what());
  }
}

std::optional<std::string> DecodeRollbackRecord(std::string_view text) {
  if (!backup::ParseBackupId(text).ok()) return std::nullopt;
  return std::string(text);
}

}  // namespace strata::agent
