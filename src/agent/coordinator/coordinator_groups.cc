// Copyright 2026 The Strata Authors.
//
// The coded peer tier's groups (docs/agent-design.md, "Coded redundancy"): the
// coordinator forms them once per round, with the round's first plan, from
// the members' failure domains (ec::FormGroups), and each node learns its
// group from its plan. Groups are the round's: a restore decodes with the
// group its parity shards name, whatever the new round forms.
#include "agent/coordinator/coordinator.h"
#include "util/logging.h"

namespace strata::agent {

Status Coordinator::FormCodedGroups(const std::string& name, Job& job) {
  if (!job.groups.empty() || job.members.empty()) return Status::Ok();
  const auto& [first, m0] = *job.members.begin();
  for (const auto& [node, m] : job.members) {
    if (m.redundancy == m0.redundancy) continue;
    return FailedPreconditionError(
        "job " + name + ": node " + std::to_string(first) + " runs redundancy " +
        m0.redundancy.ToString() + ", node " + std::to_string(node) + " " +
        m.redundancy.ToString() +
        "; every node of a job must run one (the agents' --redundancy, replicator.yaml's "
        "redundancy)");
  }
  const ec::Redundancy& r = m0.redundancy;
  if (!r.coded()) return Status::Ok();
  std::vector<std::string> domains(static_cast<size_t>(job.nodes));
  std::set<std::string> distinct;
  for (const auto& [node, m] : job.members) {
    domains[static_cast<size_t>(node)] = m.domain;
    distinct.insert(m.domain.empty() ? "node " + std::to_string(node) : m.domain);
  }
  StatusOr<ec::Groups> groups = ec::FormGroups(domains, r.group_size());
  if (!groups.ok()) {
    return FailedPreconditionError("job " + name + ": redundancy " + r.ToString() + ": " +
                                   groups.status().message());
  }
  for (const std::vector<int>& members : groups->members) {
    job.groups.push_back(ec::Group{members, r.kind, r.m});
    for (int n : members) job.group_of[n] = job.groups.size() - 1;
  }
  Log()->info(
      "job {} round {}: {} coded group(s) of {} over {} failure domain(s); a lost domain "
      "takes at most {} member(s) of a group",
      name, job.round, job.groups.size(), r.ToString(), distinct.size(), groups->max_in_one_domain);
  if (groups->max_in_one_domain > r.m) {
    Log()->warn(
        "job {}: a lost failure domain can take {} members of a group, more than {} "
        "survives; give the nodes more domains (--failure-domain)",
        name, groups->max_in_one_domain, r.ToString());
  }
  return Status::Ok();
}

}  // namespace strata::agent
