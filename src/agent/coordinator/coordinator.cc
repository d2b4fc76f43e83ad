// Copyright 2026 The Strata Authors.
#include "agent/coordinator/coordinator.h"

#include <algorithm>
#include <future>

#include "agent/metrics/agent_metrics.h"
#include "util/hash.h"
#include "util/logging.h"
#include "wire/control.h"
#include "wire/op.h"
#include "wire/op_table.h"

namespace strata::agent {

Coordinator::Coordinator(std::chrono::milliseconds wait, SteadyClock* clock)
    : table_(MakeTable()), wait_(wait), clock_(clock) {
  timer_ = std::thread([this] { TimerMain(); });
}

Coordinator::~Coordinator() {
  Shutdown();
  timer_.join();
}

void Coordinator::HandleAsync(const json& req, Done done) {
  Answer answer = Dispatch(req, done);
  RunFired();  // what this call completed for others
  if (answer) done(std::move(*answer));
}

StatusOr<json> Coordinator::Handle(const json& req) {
  std::promise<StatusOr<json>> answer;
  std::future<StatusOr<json>> got = answer.get_future();
  HandleAsync(req, [&answer](StatusOr<json> r) { answer.set_value(std::move(r)); });
  return got.get();
}

Coordinator::Table Coordinator::MakeTable() {
  using wire::Op;
  Table t("coordination");
  t.On<wire::RegisterRequest>(Op::kRegister, [this](const auto& r, Done&) { return Register(r); });
  t.On<wire::AwaitPlanRequest>(Op::kAwaitPlan,
                               [this](const auto& r, Done& done) { return AwaitPlan(r, done); });
  t.On<wire::ReadyRequest>(Op::kReady,
                           [this](const auto& r, Done& done) { return Ready(r, done); });
  t.On<wire::ReplicatedRequest>(Op::kReplicated,
                                [this](const auto& r, Done&) { return Replicated(r); });
  t.On<wire::BackupDoneRequest>(Op::kBackupDone,
                                [this](const auto& r, Done&) { return BackupDone(r); });
  t.On<wire::NodeAddressRequest>(Op::kNodeAddress,
                                 [this](const auto& r, Done&) { return NodeAddress(r); });
  t.On<wire::NoticeRequest>(Op::kNotice, [this](const auto& r, Done&) { return Notice(r); });
  t.On<wire::SyncRequest>(Op::kSync, [this](const auto& r, Done& done) { return Sync(r, done); });
  t.On<wire::QuarantineStepRequest>(Op::kQuarantineStep,
                                    [this](const auto& r, Done&) { return Quarantine(r); });
  t.On<wire::AddCopiesRequest>(Op::kAddCopies,
                               [this](const auto& r, Done&) { return AddCopies(r); });
  return t;
}

Coordinator::Answer Coordinator::Dispatch(const json& req, Done& done) {
  return table_.Serve(req, done);
}

size_t Coordinator::waiting() const {
  MutexLock l(&mu_);
  return waiting_;
}

Coordinator::Answer Coordinator::Park(const std::string& name,
                                      std::optional<std::chrono::milliseconds> asked, Check check,
                                      Done& done) {
  if (Answer now = check(false)) return now;
  const auto wait = asked ? std::min(*asked, std::chrono::milliseconds(kMaxWait)) : wait_;
  waiters_[name].push_back(Waiter{std::move(check), clock_->Now() + wait, std::move(done)});
  if (++waiting_ == 1) timer_cv_.SignalAll();
  return std::nullopt;
}

void Coordinator::Wake(const std::string& name, bool only_expired) {
  if (waking_) {  // a check that changed state (e.g. decided a sync step)
    rewake_.insert(name);
    return;
  }
  waking_ = true;
  std::string next = name;
  for (;;) {
    auto it = waiters_.find(next);
    const auto now = clock_->Now();
    // The timer's tick looks at every parked call; nothing is moved unless
    // one of them expired.
    if (only_expired && it != waiters_.end() &&
        std::none_of(it->second.begin(), it->second.end(),
                     [&](const Waiter& w) { return now >= w.deadline; })) {
      it = waiters_.end();
    }
    if (it != waiters_.end()) {  // checks never park, so `it` stays valid
      std::vector<Waiter> kept;
      kept.reserve(it->second.size());
      for (Waiter& w : it->second) {
        const bool expired = now >= w.deadline;
        Answer a = (only_expired && !expired) ? std::nullopt : w.check(expired);
        if (a) {
          fired_.push_back(Completion{std::move(w.done), std::move(*a)});
          --waiting_;
        } else {
          kept.push_back(std::move(w));
        }
      }
      if (kept.empty()) {
        waiters_.erase(it);
      } else {
        it->second = std::move(kept);
      }
    }
    if (rewake_.empty()) break;
    next = *rewake_.begin();
    rewake_.erase(rewake_.begin());
    only_expired = false;
  }
  waking_ = false;
}

void Coordinator::RunFired() {
  std::vector<Completion> fired;
  {
    MutexLock l(&mu_);
    fired.swap(fired_);
  }
  for (Completion& c : fired) c.done(std::move(c.result));
}

// Ends the waits whose deadline passed and closes the collection windows of
// on-demand steps, every kTick while anything waits.
void Coordinator::TimerMain() {
  constexpr auto kTick = std::chrono::milliseconds(20);
  MutexLock l(&mu_);
  while (!shut_down_) {
    if (waiting_ == 0) {
      timer_cv_.WaitFor(&mu_, std::chrono::milliseconds(200));  // collections without waiters
    } else {
      timer_cv_.WaitFor(&mu_, kTick);
    }
    for (auto& [name, job] : jobs_) {
      if (job.sync.collecting) MaybeDecideSync(name, job);
    }
    std::vector<std::string> names;
    for (const auto& [name, w] : waiters_) names.push_back(name);
    for (const auto& name : names) Wake(name, /*only_expired=*/true);
    if (!fired_.empty()) {
      l.Unlock();
      RunFired();
      l.Lock();
    }
  }
}

StatusOr<Coordinator::Job*> Coordinator::FindJob(const std::string& name,
                                                 std::optional<int64_t> round) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return NotFoundError("job " + name + " is not registered");
  if (round && *round != it->second.round) {
    return AbortedError("round " + std::to_string(*round) + " of job " + name +
                        " was superseded by round " + std::to_string(it->second.round));
  }
  return &it->second;
}

Status Coordinator::CheckNode(const std::string& name, const Job& job, int node) {
  if (node < job.nodes) return Status::Ok();
  return InvalidArgumentError("node " + std::to_string(node) + " is not a node of job " + name +
                              " (" + std::to_string(job.nodes) + " nodes)");
}

void Coordinator::AddInventory(const std::vector<wire::HeldCopy>& copies, int node,
                               Inventory& inventory, const std::vector<wire::HeldParity>& parity) {
  for (const wire::HeldCopy& c : copies) inventory.Add(c.rank, c.step, node, c.digest);
  for (const wire::HeldParity& p : parity) inventory.AddParity(node, p);
}

StatusOr<json> Coordinator::Register(const wire::RegisterRequest& req) {
  const std::string& name = req.job;
  const int nodes = req.nodes, node = req.node, dp = req.dp;
  const std::string address = req.address.ToString();
  const std::string& id = req.incarnation;
  if (backup_store_ != nullptr)
    RefreshCatalog(/*for_restore=*/true);  // before mu_: it reads the store
  MutexLock l(&mu_);
  Job& job = jobs_[name];
  // The same start of a node's client registering again (its reply was
  // lost, its next call refused or timed out) keeps the round: only a new
  // start, or a new member after the plan, begins one. Otherwise nodes
  // retrying under load would push each other into new rounds for ever.
  auto member = job.members.find(node);
  if (!id.empty() && member != job.members.end() && member->second.incarnation == id &&
      job.nodes == nodes && job.dp == dp) {
    member->second.address = address;
    return wire::RegisterReply{job.round}.ToJson();
  }
  bool new_round = job.nodes != nodes || job.dp != dp || job.plan.has_value() ||
                   member != job.members.end() || job.learned;
  if (new_round) {
    Job next;
    next.nodes = nodes;
    next.dp = dp;
    next.round = job.round + 1;
    // Replication reports start over: the job may have restored an older
    // step than it had replicated (from a backup, or a rollback).
    CarryBackupInFlight(name, job, nodes, dp);
    next.backup = std::move(job.backup);
    next.backup.starting = 0;
    next.backup.unheld_step = -1;  // the new round may hold older steps again
    // A decided on-demand step belongs to the round it was decided in: the
    // new round withdraws it (the generation keeps counting up).
    next.sync.generation = job.sync.generation + 1;
    next.sync.round = next.round;
    next.sync.known = std::move(job.sync.known);
    next.quarantined = std::move(job.quarantined);
    next.round_began = clock_->Now();
    job = std::move(next);
    Log()->info("job {}: round {} begins (node {} registered)", name, job.round, node);
  }
  NoteCadence(req.cadence, job);
  // A coordinator that restarted learns the job's quarantines back from the
  // nodes that remember them.
  job.quarantined.insert(req.quarantined.begin(), req.quarantined.end());
  job.members[node] = Member{address, id, false, false, req.redundancy, req.domain};
  AddInventory(req.inventory, node, job.inventory, req.parity);
  if (static_cast<int>(job.members.size()) == job.nodes) {
    Replan(name, job);
    Log()->info("job {} round {}: {}", name, job.round, job.plan->reason);
    metric::CoordinatorRoundSeconds().Observe(SecondsSince(*clock_, job.round_began));
    MaybeDecideSync(name, job);  // a notice that came while the job was registering
  }
  if (new_round || job.plan) Wake(name);  // superseded waits; the plan
  return wire::RegisterReply{job.round}.ToJson();
}

void Coordinator::Replan(const std::string& name, Job& job) {
  Inventory inventory = job.inventory;
  job.plan_backups.clear();
  job.plan_error.clear();
  AddBackupCopies(name, job, &inventory);
  for (auto& [rank, steps] : inventory.copies) {
    for (int64_t q : job.quarantined) steps.erase(q);
  }
  job.plan = PlanRestore(inventory, job.nodes, job.dp, job.excluded);
  if (!job.plan->error.empty()) job.plan_error = "job " + name + ": " + job.plan->error;
  if (Status s = FormCodedGroups(name, job); !s.ok() && job.plan_error.empty())
    job.plan_error = s.message();
  CheckRollbackPlan(job);
  if (!job.plan_error.empty())
    job.plan = RestorePlan{std::nullopt, {}, job.plan_error, job.plan_error};
  SettleBackupInFlight(name, job);
  auto b = job.plan->step ? job.plan_backups.find(*job.plan->step) : job.plan_backups.end();
  if (b != job.plan_backups.end()) job.plan->reason += " (backup " + b->second + " holds it too)";
  ++job.plan_version;
  for (auto& [n, m] : job.members) m.ready = m.failed = false;
  job.ready_count = 0;
}

json Coordinator::PlanJson(const Job& job, int node, const std::vector<int>& peers) const {
  wire::PlanReply plan;
  auto add_address = [&](int n) {
    auto m = job.members.find(n);
    if (m != job.members.end()) plan.addresses[n] = m->second.address;
  };
  auto add_source = [&](int rank, const wire::Source& src) {
    plan.sources[rank] = src;
    for (int h : src.holders) add_address(h);
    if (!src.decode) return;
    for (const wire::StripeSource& stripe : src.decode->stripes) {
      for (const wire::ShardSource& shard : stripe.shards) add_address(shard.holder);
    }
  };
  if (node < 0) {
    for (const auto& [n, m] : job.members) add_address(n);
    for (const auto& [rank, src] : job.plan->sources) add_source(rank, src);
  } else {
    auto src = job.plan->sources.find(node);
    if (src != job.plan->sources.end()) add_source(node, src->second);
    add_address(node);
    for (int p : peers) add_address(p);
    if (auto g = job.group_of.find(node); g != job.group_of.end()) {
      plan.group = job.groups[g->second];
      for (int member : plan.group->members) add_address(member);
    }
  }
  plan.round = job.round;
  plan.plan_version = job.plan_version;
  plan.step = job.plan->step;
  plan.reason = job.plan->reason;
  auto b = job.plan->step ? job.plan_backups.find(*job.plan->step) : job.plan_backups.end();
  if (b != job.plan_backups.end()) plan.backup = b->second;
  plan.error = job.plan_error;
  // A rollback: steps above it in the nodes' stores are from the abandoned
  // run and must go before anyone could restore them.
  plan.discard_above = job.rollback_step;
  plan.quarantined = job.quarantined;
  return plan.ToJson();
}

void Coordinator::Shutdown() {
  {
    MutexLock l(&mu_);
    shut_down_ = true;
    std::vector<std::string> names;
    for (const auto& [name, w] : waiters_) names.push_back(name);
    for (const auto& name : names) Wake(name);
    timer_cv_.SignalAll();
  }
  RunFired();
}

// Waits for a plan newer than the caller's "plan_version". With "node", the
// reply holds what that node needs (its source, its holders' and its
// "peers"' addresses); without, the whole plan.
Coordinator::Answer Coordinator::AwaitPlan(const wire::AwaitPlanRequest& req, Done& done) {
  MutexLock l(&mu_);
  const int64_t round = req.round;
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req.job, round));
  const std::string& name = req.job;
  const int64_t seen = req.plan_version;
  const int node = req.node.value_or(-1);
  if (req.node) STRATA_RETURN_IF_ERROR(CheckNode(name, *job, node));
  return Park(
      name, req.wait,
      [this, job, round, seen, node, peers = req.peers](bool expired) -> Answer {
        mu_.AssertHeld();  // checks run under mu_ (Park, Wake)
        if (shut_down_) return UnavailableError("the coordinator is shutting down");
        if (job->round != round)
          return AbortedError("round " + std::to_string(round) + " was superseded");
        if (job->plan && job->plan_version > seen) return PlanJson(*job, node, peers);
        if (!expired) return std::nullopt;
        return DeadlineExceededError("waiting for " +
                                     std::to_string(job->nodes - job->members.size()) +
                                     " more node(s) to register");
      },
      done);
}

// Records a node's result for the current plan and waits for the others:
// {"go": true} when every node is ready, {"replan": true} when one failed.
Coordinator::Answer Coordinator::Ready(const wire::ReadyRequest& req, Done& done) {
  static const json kReplan = wire::ReadyReply{.go = false, .replan = true, .sync = {}}.ToJson();
  MutexLock l(&mu_);
  const int64_t round = req.round;
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req.job, round));
  const std::string& name = req.job;
  const int node = req.node;
  STRATA_RETURN_IF_ERROR(CheckNode(name, *job, node));
  const int64_t version = req.plan_version;
  if (!job->plan || version != job->plan_version) return kReplan;
  Member& me = job->members[node];
  const bool was_ready = me.ready;
  me.ready = req.ok;
  me.failed = !me.ready;
  job->ready_count += static_cast<int>(me.ready) - static_cast<int>(was_ready);
  for (const wire::FailedHolder& bad : req.bad) {
    job->excluded.insert({bad.holder, bad.rank, bad.step});
  }
  if (me.failed) {
    Replan(name, *job);
    Log()->warn("node {} could not get its data; new plan: {}", node, job->plan->reason);
    Wake(name);
    return kReplan;
  }
  const bool all_ready = job->ready_count == static_cast<int>(job->members.size());
  if (all_ready && !was_ready) Restored(name, *job);  // this node was the last one
  Answer answer = Park(
      name, req.wait,
      [this, name, job, round, version](bool expired) -> Answer {
        mu_.AssertHeld();  // checks run under mu_ (Park, Wake)
        if (shut_down_) return UnavailableError("the coordinator is shutting down");
        if (job->round != round || job->plan_version != version) return kReplan;
        if (job->ready_count < static_cast<int>(job->members.size())) {
          if (!expired) return std::nullopt;
          return DeadlineExceededError("waiting for " +
                                       std::to_string(job->members.size() - job->ready_count) +
                                       " other node(s) to be ready");
        }
        wire::ReadyReply go;
        go.go = true;
        if (job->sync.step && job->sync.round == round) go.sync = Decision(*job);
        return go.ToJson();
      },
      done);
  if (all_ready) Wake(name);  // this node was the last one
  return answer;
}

// Once per round, by the call that made every node ready: what "go" means
// for the job is done before any node hears it. Not in the waiters' checks:
// those run once per node, and CountRestoredAsReplicated is O(nodes), so a
// restoring round of N nodes cost O(N^2) under mu_ (at 10,000 nodes, 6 of
// its 10 s).
void Coordinator::Restored(const std::string& name, Job& job) {
  RollbackRestored(name, job);
  CountRestoredAsReplicated(job);
  // The ranks start training once told "go": a notice that came during the
  // restore is decided now and travels with it, so that every agent
  // publishes the step before its ranks can pass it.
  MaybeDecideSync(name, job, /*now_or_never=*/true);
}

// Found by the eight-node chaos job (rs(6,2) seed 174): a restart restored
// step 1,900 from the nodes' RAM, 100 steps after the last backup, yet the
// backup of 1,900 never began: the new round's watermark waited for every
// node to replicate a save of its own, and the backup went to 1,925. A crash
// loop then poisoned 1,925, and the job fell back to the backup of 1,800.
void Coordinator::CountRestoredAsReplicated(Job& job) {
  if (!job.plan || !job.plan->step) return;
  for (int node = 0; node < job.nodes; ++node) RaiseReplicated(job, node, *job.plan->step);
}

void Coordinator::RaiseReplicated(Job& job, int node, int64_t step) {
  auto [it, first] = job.replicated.try_emplace(node, step);
  if (!first) {
    if (step <= it->second) return;
    auto c = job.replicated_count.find(it->second);
    if (--c->second == 0) job.replicated_count.erase(c);
    it->second = step;
  }
  ++job.replicated_count[step];
}

// A node's newest fully replicated step. The reply carries the job-wide
// watermark, the newest committed backup and, for a node that must upload
// a part of a backup, its task. A coordinator that restarted learns the job
// from these reports.
StatusOr<json> Coordinator::Replicated(const wire::ReplicatedRequest& req) {
  const std::string& name = req.job;
  if (backup_store_ != nullptr) RefreshCatalog(/*for_restore=*/false);
  MutexLock l(&mu_);
  if (!jobs_.count(name) && req.nodes) {
    Job& learned = jobs_[name];
    learned.nodes = *req.nodes;
    learned.dp = req.dp.value_or(1);
    learned.learned = true;
    Log()->info("job {}: learned from a report of node {}", name, req.node);
  }
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(name));
  const int node = req.node;
  STRATA_RETURN_IF_ERROR(CheckNode(name, *job, node));
  NoteCadence(req.cadence, *job);
  NoteRequests(name, req, *job);
  RaiseReplicated(*job, node, req.step);
  // The newest step every node replicated: -1 until each has reported.
  const int64_t watermark = static_cast<int>(job->replicated.size()) < job->nodes
                                ? -1
                                : job->replicated_count.begin()->first;
  if (backup_store_ != nullptr) MaybeBeginBackup(name, *job, watermark);
  wire::ReplicatedReply reply = BackupReply(*job, node);
  reply.watermark = watermark;
  return reply.ToJson();
}

// Copies a registered node received before the round's plan was made.
StatusOr<json> Coordinator::AddCopies(const wire::AddCopiesRequest& req) {
  MutexLock l(&mu_);
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req.job, req.round));
  STRATA_RETURN_IF_ERROR(CheckNode(req.job, *job, req.node));
  if (job->plan) return wire::AddCopiesReply{true}.ToJson();  // too late for this round
  AddInventory(req.inventory, req.node, job->inventory);
  return wire::AddCopiesReply{false}.ToJson();
}

StatusOr<json> Coordinator::Quarantine(const wire::QuarantineStepRequest& req) {
  const std::string& name = req.job;
  MutexLock l(&mu_);
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(name));
  STRATA_RETURN_IF_ERROR(CheckNode(name, *job, req.node));
  if (job->quarantined.insert(req.step).second) metric::Quarantines().Add();
  Log()->warn("job {}: step {} quarantined (a crash loop on node {}); it is never restored again",
              name, req.step, req.node);
  return wire::QuarantineStepReply{"job " + name + " will not restore step " +
                                   std::to_string(req.step) +
                                   " again; the next restore takes an older step"}
      .ToJson();
}

// The address of node `node` of `job` (or of the only job): how `strata
// maintenance` and `strata health` reach a node through the coordinator.
StatusOr<json> Coordinator::NodeAddress(const wire::NodeAddressRequest& req) {
  MutexLock l(&mu_);
  const Job* job = nullptr;
  std::string name;
  if (req.job) {
    name = *req.job;
    auto it = jobs_.find(name);
    if (it != jobs_.end()) job = &it->second;
  } else if (jobs_.size() == 1) {
    name = jobs_.begin()->first;
    job = &jobs_.begin()->second;
  } else if (jobs_.size() > 1) {
    return InvalidArgumentError("the coordinator serves " + std::to_string(jobs_.size()) +
                                " jobs: name one with --job");
  }
  if (job == nullptr)
    return NotFoundError("the coordinator knows no job" +
                         (name.empty() ? std::string() : " " + name));
  const int node = req.node;
  auto m = job->members.find(node);
  if (m == job->members.end()) {
    return NotFoundError("node " + std::to_string(node) + " has not registered in job " + name +
                         " (round " + std::to_string(job->round) + ")");
  }
  return wire::NodeAddressReply{name, node, m->second.address}.ToJson();
}

}  // namespace strata::agent
