// Copyright 2026 The Strata Authors.
//
// The job's on-demand step. A maintenance notice reaches one node (a rank's
// SIGTERM, the agent's own SIGTERM, `strata maintenance`); its agent calls
// "notice". The coordinator then collects where every node's ranks are:
// each agent keeps a "sync" call waiting here, is woken, and calls again
// with its ranks' newest step and step rate. With every node's report, or
// after kCollectWindow with the newest known for the silent ones, it decides
//
//   sync step = max over nodes (step + rate * lead, rounded up) + 1
//
// — the first step no rank can have passed by the time the agents publish
// it, so every rank saves the same step, within a couple of steps of the
// notice. The decision is answered to every waiting "sync" call; a new
// round (the job restarted) withdraws it.
#include <cmath>

#include "agent/coordinator/coordinator.h"
#include "util/logging.h"
#include "util/time_format.h"

namespace strata::agent {
namespace {

constexpr auto kCollectWindow = std::chrono::milliseconds(1000);
// How far ahead of the ranks the step is placed: the agents' view of their
// ranks is up to one slot poll (50 ms) old, and publishing the decision
// takes about as long as collecting took; twice that, plus the poll, with
// room to spare. Capped for a collection that waited for a silent node.
double LeadSeconds(double collect_seconds) { return std::min(0.1 + 2 * collect_seconds, 1.0); }

// Where the node's ranks will be kLeadSeconds from now, as last heard.
// At least one step ahead: a rate of 0 may only mean the node's agent has
// not measured one yet.
int64_t Projected(int64_t step, double rate, double ahead_seconds) {
  if (step < 0) return -1;
  return step +
         std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::max(0.0, rate) * ahead_seconds)));
}

}  // namespace

wire::SyncDecision Coordinator::Decision(const Job& job) {
  const SyncState& s = job.sync;
  wire::SyncDecision d;
  d.generation = s.generation;
  d.round = s.round;
  d.collect = s.collect_id;
  d.collecting = s.collecting;
  d.step = s.step;
  if (s.step) {
    d.notice_unix_ms = s.notice_unix_ms;
    if (s.notice_step >= 0) d.notice_step = s.notice_step;
    d.origin = s.origin;
  }
  return d;
}

StatusOr<json> Coordinator::Notice(const wire::NoticeRequest& req) {
  const std::string& name = req.job;
  MutexLock l(&mu_);
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(name));
  const int node = req.node;
  STRATA_RETURN_IF_ERROR(CheckNode(name, *job, node));
  SyncState& s = job->sync;
  std::string origin = "node " + std::to_string(node) + " (" + req.origin + ")";
  // A notice joins the decided step unless the notifying node's ranks are
  // already past it (the job saved it and trained on): then it is a new
  // event and needs a step of its own.
  const int64_t at = req.step;
  if (s.step && s.round == job->round && at < *s.step) {
    Log()->info("job {}: notice from {} joins the on-demand step {}", name, origin, *s.step);
    return SyncJson(*job);
  }
  if (s.collecting) {
    Log()->info("job {}: notice from {} joins the collection in progress", name, origin);
    return SyncJson(*job);
  }
  s.collecting = true;
  ++s.collect_id;
  s.collect_deadline = clock_->Now() + kCollectWindow;
  s.reports.clear();
  s.notice_unix_ms = UnixMillisNow();
  s.notice_step = at;
  s.origin = origin;
  Log()->info("job {} round {}: maintenance notice from {}; collecting the nodes' steps", name,
              job->round, origin);
  Wake(name);
  return SyncJson(*job);
}

// A node's long-standing call: records its progress, answers at once when
// the caller's view is stale (a new decision, a collection it has not
// reported to), else waits up to wait_ for one.
Coordinator::Answer Coordinator::Sync(const wire::SyncRequest& req, Done& done) {
  const std::string& name = req.job;
  MutexLock l(&mu_);
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(name));
  const int node = req.node;
  STRATA_RETURN_IF_ERROR(CheckNode(name, *job, node));
  // Restarted, this coordinator learned the job from replication reports,
  // which do not say its round: the nodes' sync calls do. Without it every
  // decision would be for round 0, which no node takes.
  if (job->learned && req.round && *req.round > job->round) {
    Log()->info("job {}: round {} learned from node {}", name, *req.round, node);
    job->round = *req.round;
  }
  NodeProgress p{req.step, req.rate, clock_->Now()};
  job->sync.known[node] = p;
  const uint64_t generation = req.generation;
  const uint64_t collect = req.collect;
  if (job->sync.collecting && collect == job->sync.collect_id) job->sync.reports[node] = p;
  MaybeDecideSync(name, *job);
  // The timer thread closes a collection window that runs out meanwhile.
  return Park(
      name, req.wait,
      [this, job, generation, collect](bool expired) -> Answer {
        mu_.AssertHeld();  // checks run under mu_ (Park, Wake)
        if (shut_down_) return UnavailableError("the coordinator is shutting down");
        const SyncState& s = job->sync;
        const bool stale = s.generation != generation || (s.collecting && s.collect_id != collect);
        if (stale || expired) return SyncJson(*job);
        return std::nullopt;
      },
      done);
}

void Coordinator::MaybeDecideSync(const std::string& name, Job& job, bool now_or_never) {
  SyncState& s = job.sync;
  if (!s.collecting) return;
  const auto now = clock_->Now();
  const bool all = static_cast<int>(s.reports.size()) >= job.nodes;
  if (!all && now < s.collect_deadline && !now_or_never) return;
  // A job still registering has no ranks running and no restore step yet:
  // decide once the plan says where the ranks will resume.
  // (A job learned after a restart of the coordinator is training.)
  if (!job.learned && !job.plan && static_cast<int>(job.members.size()) < job.nodes) return;
  const double lead = LeadSeconds(
      std::chrono::duration<double>(now - (s.collect_deadline - kCollectWindow)).count());
  int64_t newest = -1;
  std::string silent;
  for (int n = 0; n < job.nodes; ++n) {
    auto r = s.reports.find(n);
    if (r != s.reports.end()) {
      newest = std::max(newest, Projected(r->second.step, r->second.rate, lead));
      continue;
    }
    silent += (silent.empty() ? "" : ", ") + std::to_string(n);
    auto k = s.known.find(n);
    if (k == s.known.end()) continue;
    double age = std::chrono::duration<double>(now - k->second.at).count();
    newest = std::max(newest, Projected(k->second.step, k->second.rate, age + lead));
  }
  // Ranks that are restoring have no step yet: they resume after the
  // restored step, so the sync step is never at or below it.
  if (job.plan && job.plan->step) newest = std::max(newest, *job.plan->step);
  s.collecting = false;
  s.step = std::max<int64_t>(newest + 1, 1);
  s.round = job.round;
  ++s.generation;
  Log()->info("job {} round {}: on-demand step {} for every rank (notice from {}){}", name,
              job.round, *s.step, s.origin,
              silent.empty() ? "" : "; no report from node(s) " + silent + ", used their last");
  Wake(name);
}

}  // namespace strata::agent
