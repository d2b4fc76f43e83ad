// Copyright 2026 The Strata Authors.
#include "agent/coordinator.h"

#include <future>

#include "util/hash.h"
#include "util/logging.h"
#include "wire/op.h"

namespace strata::agent {

StatusOr<int> IntField(const json& j, const char* key, int min, int max) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return InvalidArgumentError(std::string("missing integer \"") + key + "\"");
  }
  int64_t v = it->get<int64_t>();
  if (v < min || v > max) return InvalidArgumentError(std::string("\"") + key + "\" out of range");
  return static_cast<int>(v);
}

StatusOr<std::string> JobField(const json& j) {
  auto it = j.find("job");
  if (it == j.end() || !it->is_string()) return InvalidArgumentError("missing \"job\"");
  std::string job = it->get<std::string>();
  STRATA_RETURN_IF_ERROR(ValidateJobName(job));
  return job;
}

Coordinator::Coordinator(std::chrono::milliseconds wait) : wait_(wait) {
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

Coordinator::Answer Coordinator::Dispatch(const json& req, Done& done) {
  STRATA_ASSIGN_OR_RETURN(wire::Op op, wire::ParseOp(req));
  switch (op) {
    case wire::Op::kRegister:
      return Register(req);
    case wire::Op::kAwaitPlan:
      return AwaitPlan(req, done);
    case wire::Op::kReady:
      return Ready(req, done);
    case wire::Op::kReplicated:
      return Replicated(req);
    case wire::Op::kBackupDone:
      return BackupDone(req);
    case wire::Op::kNodeAddress:
      return NodeAddress(req);
    case wire::Op::kNotice:
      return Notice(req);
    case wire::Op::kSync:
      return Sync(req, done);
    case wire::Op::kQuarantineStep:
      return Quarantine(req);
    case wire::Op::kAddCopies:
      return AddCopies(req);
    default:
      return NotFoundError("\"" + std::string(wire::OpName(op)) + "\" is not a coordination call");
  }
}

size_t Coordinator::waiting() const {
  MutexLock l(&mu_);
  return waiting_;
}

Coordinator::Answer Coordinator::Park(const std::string& name, const json& req, Check check,
                                      Done& done) {
  if (Answer now = check(false)) return now;
  auto wait = wait_;
  auto w = req.find("wait_ms");
  if (w != req.end() && w->is_number_unsigned()) {
    wait = std::min(std::chrono::milliseconds(w->get<uint64_t>()), kMaxWait);
  }
  waiters_[name].push_back(Waiter{std::move(check), Clock::now() + wait, std::move(done)});
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
    if (it != waiters_.end()) {  // checks never park, so `it` stays valid
      const auto now = Clock::now();
      std::vector<Waiter> kept;
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

StatusOr<Coordinator::Job*> Coordinator::FindJob(const json& req, int64_t* round) {
  STRATA_ASSIGN_OR_RETURN(std::string name, JobField(req));
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return NotFoundError("job " + name + " is not registered");
  if (round) {
    auto r = req.find("round");
    if (r == req.end() || !r->is_number_integer()) return InvalidArgumentError("missing \"round\"");
    *round = r->get<int64_t>();
    if (*round != it->second.round) {
      return AbortedError("round " + std::to_string(*round) + " of job " + name +
                          " was superseded by round " + std::to_string(it->second.round));
    }
  }
  return &it->second;
}

Status Coordinator::AddInventory(const json& req, int node, Inventory& inventory) {
  const json& inv = req.contains("inventory") ? req["inventory"] : json::array();
  for (const auto& c : inv) {
    if (!c.is_array() || c.size() != 3 || !c[0].is_number_integer() || !c[1].is_number_integer() ||
        !c[2].is_string()) {
      return InvalidArgumentError("malformed inventory entry from node " + std::to_string(node));
    }
    auto digest = ParseHex64(c[2].get<std::string>());
    if (!digest)
      return InvalidArgumentError("bad digest in the inventory of node " + std::to_string(node));
    inventory.Add(c[0].get<int>(), c[1].get<int64_t>(), node, *digest);
  }
  return Status::Ok();
}

StatusOr<json> Coordinator::Register(const json& req) {
  STRATA_ASSIGN_OR_RETURN(std::string name, JobField(req));
  STRATA_ASSIGN_OR_RETURN(int nodes, IntField(req, "nodes", 1, 100000));
  STRATA_ASSIGN_OR_RETURN(int node, IntField(req, "node", 0, nodes - 1));
  STRATA_ASSIGN_OR_RETURN(int dp, IntField(req, "dp", 1, nodes));
  std::string address = req.value("address", "");
  STRATA_RETURN_IF_ERROR(ParseEndpoint(address).status());
  if (backup_store_ != nullptr)
    RefreshCatalog(/*for_restore=*/true);  // before mu_: it reads the store
  auto incarnation = req.find("incarnation");
  const std::string id =
      incarnation != req.end() && incarnation->is_string() ? incarnation->get<std::string>() : "";
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
    return json{{"round", job.round}};
  }
  bool new_round =
      job.nodes != nodes || job.dp != dp || job.plan.has_value() || member != job.members.end();
  if (new_round) {
    Job next;
    next.nodes = nodes;
    next.dp = dp;
    next.round = job.round + 1;
    // Replication reports start over: the job may have restored an older
    // step than it had replicated (from a backup, or a rollback).
    next.backup = std::move(job.backup);
    next.backup.in_flight.reset();  // a backup of the previous round is never committed
    next.backup.starting = 0;
    // A decided on-demand step belongs to the round it was decided in: the
    // new round withdraws it (the generation keeps counting up).
    next.sync.generation = job.sync.generation + 1;
    next.sync.round = next.round;
    next.sync.known = std::move(job.sync.known);
    next.quarantined = std::move(job.quarantined);
    job = std::move(next);
    Log()->info("job {}: round {} begins (node {} registered)", name, job.round, node);
  }
  NoteCadence(req, job);
  job.members[node] = Member{address, id};
  STRATA_RETURN_IF_ERROR(AddInventory(req, node, job.inventory));
  if (static_cast<int>(job.members.size()) == job.nodes) {
    Replan(name, job);
    Log()->info("job {} round {}: {}", name, job.round, job.plan->reason);
    MaybeDecideSync(name, job);  // a notice that came while the job was registering
  }
  if (new_round || job.plan) Wake(name);  // superseded waits; the plan
  return json{{"round", job.round}};
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
  CheckRollbackPlan(job);
  if (!job.plan_error.empty()) job.plan = RestorePlan{std::nullopt, {}, job.plan_error};
  auto b = job.plan->step ? job.plan_backups.find(*job.plan->step) : job.plan_backups.end();
  if (b != job.plan_backups.end()) job.plan->reason += " (backup " + b->second + " holds it too)";
  ++job.plan_version;
  for (auto& [n, m] : job.members) m.ready = m.failed = false;
  job.ready_count = 0;
}

json Coordinator::PlanJson(const Job& job, int node, const std::vector<int>& peers) const {
  json addresses = json::object();
  auto add_address = [&](int n) {
    auto m = job.members.find(n);
    if (m != job.members.end()) addresses[std::to_string(n)] = m->second.address;
  };
  json sources = json::object();
  auto add_source = [&](int rank, const Source& src) {
    sources[std::to_string(rank)] = {
        {"source_rank", src.source_rank}, {"holders", src.holders}, {"digest", Hex64(src.digest)}};
    for (int h : src.holders) add_address(h);
  };
  if (node < 0) {
    for (const auto& [n, m] : job.members) add_address(n);
    for (const auto& [rank, src] : job.plan->sources) add_source(rank, src);
  } else {
    auto src = job.plan->sources.find(node);
    if (src != job.plan->sources.end()) add_source(node, src->second);
    add_address(node);
    for (int p : peers) add_address(p);
  }
  json step = job.plan->step ? json(*job.plan->step) : json(nullptr);
  json plan = {{"round", job.round},     {"plan_version", job.plan_version},
               {"step", step},           {"sources", sources},
               {"addresses", addresses}, {"reason", job.plan->reason}};
  auto b = job.plan->step ? job.plan_backups.find(*job.plan->step) : job.plan_backups.end();
  if (b != job.plan_backups.end()) plan["backup"] = b->second;
  if (!job.plan_error.empty()) plan["error"] = job.plan_error;
  // A rollback: steps above it in the nodes' stores are from the abandoned
  // run and must go before anyone could restore them.
  if (job.rollback_step) plan["discard_above"] = *job.rollback_step;
  return plan;
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
Coordinator::Answer Coordinator::AwaitPlan(const json& req, Done& done) {
  MutexLock l(&mu_);
  int64_t round;
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req, &round));
  const std::string name = req["job"].get<std::string>();
  const int64_t seen = req.value("plan_version", int64_t{0});
  const int node = req.value("node", -1);
  std::vector<int> peers;
  auto p = req.find("peers");
  if (p != req.end() && p->is_array()) {
    for (const auto& n : *p) {
      if (!n.is_number_integer()) {
        return InvalidArgumentError("await_plan of job " + name +
                                    ": \"peers\" must hold node ranks");
      }
      peers.push_back(n.get<int>());
    }
  }
  return Park(
      name, req,
      [this, job, round, seen, node, peers = std::move(peers)](bool expired) -> Answer {
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
Coordinator::Answer Coordinator::Ready(const json& req, Done& done) {
  MutexLock l(&mu_);
  int64_t round;
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req, &round));
  const std::string name = req["job"].get<std::string>();
  STRATA_ASSIGN_OR_RETURN(int node, IntField(req, "node", 0, job->nodes - 1));
  int64_t version = req.value("plan_version", int64_t{-1});
  if (!job->plan || version != job->plan_version) return json{{"replan", true}};
  Member& me = job->members[node];
  const bool was_ready = me.ready;
  me.ready = req.value("ok", false);
  me.failed = !me.ready;
  job->ready_count += static_cast<int>(me.ready) - static_cast<int>(was_ready);
  for (const auto& bad : req.value("bad", json::array())) {
    if (bad.is_array() && bad.size() == 3) {
      job->excluded.insert({bad[0].get<int>(), bad[1].get<int>(), bad[2].get<int64_t>()});
    }
  }
  if (me.failed) {
    Replan(name, *job);
    Log()->warn("node {} could not get its data; new plan: {}", node, job->plan->reason);
    Wake(name);
    return json{{"replan", true}};
  }
  const bool all_ready = job->ready_count == static_cast<int>(job->members.size());
  Answer answer = Park(
      name, req,
      [this, name, job, round, version](bool expired) -> Answer {
        mu_.AssertHeld();  // checks run under mu_ (Park, Wake)
        if (shut_down_) return UnavailableError("the coordinator is shutting down");
        if (job->round != round || job->plan_version != version) return json{{"replan", true}};
        if (job->ready_count < static_cast<int>(job->members.size())) {
          if (!expired) return std::nullopt;
          return DeadlineExceededError("waiting for " +
                                       std::to_string(job->members.size() - job->ready_count) +
                                       " other node(s) to be ready");
        }
        RollbackRestored(name, *job);
        // The ranks start training once told "go": a notice that came
        // during the restore is decided now and travels with it, so that
        // every agent publishes the step before its ranks can pass it.
        MaybeDecideSync(name, *job, /*now_or_never=*/true);
        json go = {{"go", true}};
        if (job->sync.step && job->sync.round == round) go["sync"] = SyncJson(*job);
        return go;
      },
      done);
  if (all_ready) Wake(name);  // this node was the last one
  return answer;
}

// A node's newest fully replicated step. The reply carries the job-wide
// watermark, the newest committed backup and, for a node that must upload
// a part of a backup, its task. A coordinator that restarted learns the job
// from these reports.
StatusOr<json> Coordinator::Replicated(const json& req) {
  STRATA_ASSIGN_OR_RETURN(std::string name, JobField(req));
  if (backup_store_ != nullptr) RefreshCatalog(/*for_restore=*/false);
  MutexLock l(&mu_);
  if (!jobs_.count(name) && req.contains("nodes")) {
    STRATA_ASSIGN_OR_RETURN(int nodes, IntField(req, "nodes", 1, 100000));
    STRATA_ASSIGN_OR_RETURN(int dp, IntField(req, "dp", 1, nodes));
    Job& learned = jobs_[name];
    learned.nodes = nodes;
    learned.dp = dp;
    Log()->info("job {}: learned from a report of node {}", name, req.value("node", -1));
  }
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req, nullptr));
  STRATA_ASSIGN_OR_RETURN(int node, IntField(req, "node", 0, job->nodes - 1));
  NoteCadence(req, *job);
  int64_t step = req.value("step", int64_t{-1});
  auto [r, first] = job->replicated.try_emplace(node, step);
  if (first) {
    ++job->replicated_count[step];
  } else if (step > r->second) {
    auto c = job->replicated_count.find(r->second);
    if (--c->second == 0) job->replicated_count.erase(c);
    r->second = step;
    ++job->replicated_count[step];
  }
  // The newest step every node replicated: -1 until each has reported.
  const int64_t watermark = static_cast<int>(job->replicated.size()) < job->nodes
                                ? -1
                                : job->replicated_count.begin()->first;
  if (backup_store_ != nullptr) MaybeBeginBackup(name, *job, watermark);
  json reply = BackupReply(*job, node);
  reply["watermark"] = watermark;
  return reply;
}

// Copies a registered node received before the round's plan was made.
StatusOr<json> Coordinator::AddCopies(const json& req) {
  MutexLock l(&mu_);
  int64_t round;
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req, &round));
  STRATA_ASSIGN_OR_RETURN(int node, IntField(req, "node", 0, job->nodes - 1));
  if (job->plan) return json{{"planned", true}};  // too late for this round
  STRATA_RETURN_IF_ERROR(AddInventory(req, node, job->inventory));
  return json{{"planned", false}};
}

StatusOr<json> Coordinator::Quarantine(const json& req) {
  STRATA_ASSIGN_OR_RETURN(std::string name, JobField(req));
  MutexLock l(&mu_);
  STRATA_ASSIGN_OR_RETURN(Job * job, FindJob(req, nullptr));
  STRATA_ASSIGN_OR_RETURN(int node, IntField(req, "node", 0, job->nodes - 1));
  auto step = req.find("step");
  if (step == req.end() || !step->is_number_integer()) {
    return InvalidArgumentError("quarantine: missing integer \"step\"");
  }
  job->quarantined.insert(step->get<int64_t>());
  Log()->warn("job {}: step {} quarantined (a crash loop on node {}); it is never restored again",
              name, step->get<int64_t>(), node);
  return json{{"description", "job " + name + " will not restore step " +
                                  std::to_string(step->get<int64_t>()) +
                                  " again; the next restore takes an older step"}};
}

// The address of node `node` of `job` (or of the only job): how `strata
// maintenance` and `strata health` reach a node through the coordinator.
StatusOr<json> Coordinator::NodeAddress(const json& req) {
  MutexLock l(&mu_);
  const Job* job = nullptr;
  std::string name;
  if (req.contains("job")) {
    STRATA_ASSIGN_OR_RETURN(name, JobField(req));
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
  STRATA_ASSIGN_OR_RETURN(int node, IntField(req, "node", 0, 1 << 30));
  auto m = job->members.find(node);
  if (m == job->members.end()) {
    return NotFoundError("node " + std::to_string(node) + " has not registered in job " + name +
                         " (round " + std::to_string(job->round) + ")");
  }
  return json{{"job", name}, {"node", node}, {"address", m->second.address}};
}

}  // namespace strata::agent
