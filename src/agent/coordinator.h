// Copyright 2026 The Strata Authors.
//
// Coordinator: the job-wide state served by the agent of node rank 0.
//
// An incarnation of a job is a *round*: every node registers (with its
// address and the verified copies it holds), and once all `nodes` have
// registered the coordinator makes the restore decision (PlanRestore). Nodes
// fetch what they lack and report ready; when every node is ready the round
// says "go" and the nodes create their restore markers. A node that reports
// a copy that failed verification makes the coordinator plan again without
// it. A registration from a node that already belongs to a decided round
// starts the next round (the job restarted).
//
// Each call may block (waiting for the other nodes) for at most `wait`;
// callers retry on DEADLINE_EXCEEDED (short waits keep a waiting agent
// responsive to shutdown and to a new replicator.yaml). Thread-safe.
#ifndef STRATA_AGENT_COORDINATOR_H_
#define STRATA_AGENT_COORDINATOR_H_

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "agent/planner.h"
#include "agent/rpc.h"

namespace strata::agent {

class Coordinator {
 public:
  explicit Coordinator(std::chrono::milliseconds wait = std::chrono::seconds(2)) : wait_(wait) {}

  // Dispatches a coordination call ("register", "await_plan", "ready",
  // "replicated", "members"); NOT_FOUND for other ops.
  StatusOr<json> Handle(const json& request);

 private:
  struct Member {
    std::string address;
    bool ready = false;
    bool failed = false;
  };
  struct Job {
    int nodes = 0;
    int dp = 1;
    int64_t round = 0;
    int64_t plan_version = 0;  // bumped by every replan
    std::map<int, Member> members;
    Inventory inventory;
    std::set<std::tuple<int, int, int64_t>> excluded;
    std::optional<RestorePlan> plan;
    std::map<int, int64_t> replicated;  // newest fully replicated step per node
  };

  StatusOr<json> Register(const json& req);
  StatusOr<json> AwaitPlan(const json& req);
  StatusOr<json> Ready(const json& req);
  StatusOr<json> Replicated(const json& req);
  StatusOr<json> Members(const json& req);
  json PlanJson(const Job& job) const;
  void Replan(Job& job);                                    // REQUIRES: mu_ held
  StatusOr<Job*> FindJob(const json& req, int64_t* round);  // REQUIRES: mu_ held

  const std::chrono::milliseconds wait_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Job> jobs_;  // GUARDED_BY(mu_)
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_COORDINATOR_H_
