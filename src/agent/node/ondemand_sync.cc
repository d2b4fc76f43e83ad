// Copyright 2026 The Strata Authors.
#include "agent/node/ondemand_sync.h"

#include <algorithm>
#include <deque>
#include <map>

#include "agent/metrics/agent_metrics.h"
#include "agent/rpc/client.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

constexpr auto kSlotPoll = std::chrono::milliseconds(50);
constexpr auto kRateWindow = std::chrono::seconds(2);
constexpr auto kSyncWait = std::chrono::seconds(10);
constexpr auto kNoticeTimeout = std::chrono::seconds(5);
constexpr auto kNoticeRetry = std::chrono::milliseconds(500);
// A step published before any rank registered (on "go", for ranks that
// open their checkpointer after the markers) is kept this long for them.
constexpr auto kKeepForLateRanks = std::chrono::minutes(1);

}  // namespace

StatusOr<std::unique_ptr<OnDemandSync>> OnDemandSync::Open(const std::string& path, gid_t group,
                                                           net::Trust trust, SteadyClock* clock,
                                                           Hooks hooks) {
  STRATA_ASSIGN_OR_RETURN(SyncMap map, SyncMap::OpenOrCreate(path, group));
  // A step published by a previous agent process was for ranks that have
  // restarted since, or will see it again from the coordinator.
  map.Publish(kNoSyncStep, 0);
  return std::unique_ptr<OnDemandSync>(
      new OnDemandSync(std::move(map), group, std::move(trust), clock, std::move(hooks)));
}

OnDemandSync::OnDemandSync(SyncMap map, gid_t group, net::Trust trust, SteadyClock* clock,
                           Hooks hooks)
    : map_(std::move(map)),
      group_(group),
      trust_(std::move(trust)),
      clock_(clock),
      hooks_(std::move(hooks)) {}

OnDemandSync::~OnDemandSync() { Stop(); }

void OnDemandSync::Start() {
  notice_thread_ = std::thread([this] { NoticeMain(); });
  sync_thread_ = std::thread([this] { SyncMain(); });
}

void OnDemandSync::Stop() {
  stopped_ = true;
  {
    MutexLock l(&socket_mu_);
    if (socket_ != nullptr) socket_->Shutdown();  // ends its wait
  }
  if (notice_thread_.joinable()) notice_thread_.join();
  if (sync_thread_.joinable()) sync_thread_.join();
}

void OnDemandSync::SetJob(std::optional<Job> job) {
  MutexLock l(&mu_);
  job_ = std::move(job);
}

std::optional<OnDemandSync::Job> OnDemandSync::job() const {
  MutexLock l(&mu_);
  return job_;
}

void OnDemandSync::Restart(const char* why) {
  MutexLock l(&mu_);
  job_.reset();
  Withdraw(why);
  step_ = kNoSyncStep;
}

void OnDemandSync::ForgetStep() {
  MutexLock l(&mu_);
  step_ = kNoSyncStep;
}

int64_t OnDemandSync::step() const {
  MutexLock l(&mu_);
  return step_;
}

SteadyClock::time_point OnDemandSync::decided_at() const {
  MutexLock l(&mu_);
  return decided_at_;
}

bool OnDemandSync::NoticeHeard() const {
  MutexLock l(&mu_);
  return notice_unsent_.empty() || !job_;  // no job: no one to tell
}

std::shared_ptr<const PinnedProcess> OnDemandSync::Rank(int slot, int64_t pid) const {
  if (auto it = registered_.find(slot); it != registered_.end()) {
    if (it->second.pid == pid) return it->second.process->Alive() ? it->second.process : nullptr;
    registered_.erase(it);  // the slot changed hands
  }
  if (auto it = refused_.find(slot); it != refused_.end() && it->second == pid) return nullptr;
  StatusOr<PinnedProcess> p = PinnedProcess::Open(pid);
  if (!p.ok() && p.status().code() == StatusCode::kNotFound) return nullptr;  // gone already
  std::string why;
  if (!p.ok()) {
    why = std::string(p.status().message());
  } else if (pid == 1) {
    why = "it is the init process";
  } else if (!p->credentials().InGroup(group_)) {
    why = "it runs as uid " + std::to_string(p->credentials().uids[0]) + ", gid " +
          std::to_string(p->credentials().gids[0]) + ", outside the job's group " +
          std::to_string(group_) + " (the group of " + map_.path() + ")";
  }
  if (!why.empty()) {
    refused_[slot] = pid;
    Log()->warn(
        "slot {} of {} names pid {}, which is not a rank of this job: {}; it is never "
        "signalled or waited for",
        slot, map_.path(), pid, why);
    return nullptr;
  }
  refused_.erase(slot);
  auto process = std::make_shared<const PinnedProcess>(std::move(*p));
  registered_[slot] = Registered{pid, process};
  return process;
}

std::vector<std::pair<int, int64_t>> OnDemandSync::LiveRanks() const {
  std::vector<std::pair<int, int64_t>> out;
  MutexLock l(&ranks_mu_);
  for (int i = 0; i < kSyncSlots; ++i) {
    const int64_t pid = map_.slot(i).pid.load();
    if (pid <= 0) {  // free, or being claimed
      // A rank may free its slot before its process is gone (a framework's
      // teardown): it stays registered, for a maintenance event's wait.
      auto it = registered_.find(i);
      if (it != registered_.end() && !it->second.process->Alive()) registered_.erase(it);
      continue;
    }
    if (Rank(i, pid) != nullptr) out.emplace_back(i, pid);
  }
  return out;
}

bool OnDemandSync::SignalRank(int slot, int64_t pid, int sig) const {
  MutexLock l(&ranks_mu_);
  auto it = registered_.find(slot);
  if (it == registered_.end() || it->second.pid != pid) return false;
  Status s = it->second.process->Signal(sig);
  if (!s.ok() && s.code() != StatusCode::kNotFound) {
    Log()->warn("signal {} to rank pid {}: {}", sig, pid, s.message());
  }
  return s.ok();
}

bool OnDemandSync::RankAlive(int slot, int64_t pid) const {
  MutexLock l(&ranks_mu_);
  auto it = registered_.find(slot);
  return it != registered_.end() && it->second.pid == pid && it->second.process->Alive();
}

std::vector<wire::StatusReply::Rank> OnDemandSync::RankStatus() const {
  std::vector<wire::StatusReply::Rank> out;
  for (auto [slot, pid] : LiveRanks()) {
    const SyncSlot& s = map_.slot(slot);
    out.push_back({pid, s.current_step.load(), s.notices.load(), s.saved_step.load(),
                   static_cast<double>(s.save_stall_us.load()) / 1e6, s.saves.load()});
  }
  return out;
}

std::pair<uint64_t, uint64_t> OnDemandSync::StagingBytes() const {
  std::pair<uint64_t, uint64_t> out{0, 0};
  for (auto [slot, pid] : LiveRanks()) {
    const int64_t v = map_.slot(slot).staging.load();
    const auto bytes = static_cast<uint64_t>(v & ~kStagingPinned);
    ((v & kStagingPinned) != 0 ? out.first : out.second) += bytes;
  }
  return out;
}

// Watches the ranks: their step (and rate, for the coordinator's choice of
// the sync step) and their notices. Also withdraws a published step once
// every rank that was there when it was published has served it or exited.
void OnDemandSync::NoticeMain() {
  std::map<int, std::pair<int64_t, uint64_t>> seen;  // slot -> (pid, notices acted on)
  std::deque<std::pair<SteadyClock::time_point, int64_t>> samples;
  SteadyClock::time_point last_post{};
  while (!Stopping()) {
    std::this_thread::sleep_for(kSlotPoll);
    int64_t step = -1;
    std::string notice;
    for (auto [i, pid] : LiveRanks()) {
      const SyncSlot& s = map_.slot(i);
      step = std::max(step, s.current_step.load(std::memory_order_relaxed));
      uint64_t n = s.notices.load();
      auto& [seen_pid, acted] = seen[i];
      if (seen_pid != pid) seen_pid = pid, acted = 0;
      if (n > acted) {
        acted = n;
        notice = "SIGTERM to rank pid " + std::to_string(pid);
      }
    }
    // The step rate over the last kRateWindow, from samples of running
    // ranks only (a restart, or no rank, starts the window again).
    const auto now = clock_->Now();
    if (step < 0 || (!samples.empty() && step < samples.back().second)) samples.clear();
    if (step >= 0) samples.emplace_back(now, step);
    while (samples.size() > 2 && now - samples.front().first > kRateWindow) samples.pop_front();
    if (samples.size() >= 2) {
      double dt = std::chrono::duration<double>(now - samples.front().first).count();
      if (dt >= 0.1) node_rate_.store(static_cast<double>(step - samples.front().second) / dt);
    }
    node_step_.store(step);
    {
      MutexLock l(&mu_);
      if (published_ != kNoSyncStep && RanksDone()) Withdraw("every rank served it");
      // A notice the coordinator has not heard yet: retry at most twice a second.
      if (notice.empty() && !notice_unsent_.empty() && now - last_post > kNoticeRetry) {
        notice = notice_unsent_;
      }
    }
    if (!notice.empty()) {
      last_post = now;
      PostNotice(notice);
    }
  }
}

bool OnDemandSync::RanksDone() const {
  if (pids_.empty()) return clock_->Now() - decided_at_ > kKeepForLateRanks;
  for (int64_t pid : pids_) {
    for (int i = 0; i < kSyncSlots; ++i) {
      const SyncSlot& s = map_.slot(i);
      if (s.pid.load() != pid || !ProcessAlive(pid)) continue;
      if (s.served.load() != map_.header().generation.load()) return false;
    }
  }
  return true;
}

void OnDemandSync::PostNotice(const std::string& origin) {
  std::optional<Job> job;
  {
    MutexLock l(&mu_);
    job = job_;
    if (!job) {
      if (notice_unsent_ != origin) {
        Log()->warn("maintenance notice ({}) before this node joined a job: held until it does",
                    origin);
      }
      notice_unsent_ = origin;
      return;
    }
  }
  wire::NoticeRequest req;
  req.job = job->config.job_name;
  req.node = job->config.node_rank;
  req.step = node_step_.load();
  req.origin = origin;
  auto r = hooks_.call_coordinator(job->config, req.ToJson(), kNoticeTimeout);
  if (!r.ok()) {
    Log()->warn("telling the coordinator of a maintenance notice ({}): {} (will retry)", origin,
                r.status().message());
    MutexLock l(&mu_);
    notice_unsent_ = origin;  // NoticeMain retries
    return;
  }
  Log()->info("maintenance notice ({}) sent to the coordinator", origin);
  MutexLock l(&mu_);
  if (notice_unsent_ == origin) notice_unsent_.clear();
}

// One "sync" call at a time, each waiting at the coordinator for news, on
// one connection kept open between calls (a job of N nodes would otherwise
// cost the coordinator N handshakes per wait). Stop() shuts the connection
// down to end a wait early.
void OnDemandSync::SyncMain() {
  uint64_t generation = 0, collect = 0;
  std::optional<RpcClient> client;
  std::string connected_to;
  auto drop = [&] {
    MutexLock l(&socket_mu_);
    socket_ = nullptr;
    client.reset();
  };
  while (!Stopping()) {
    std::optional<Job> job = this->job();
    if (!job) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    auto to = hooks_.coordinator(job->config);
    if (!to) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    if (client && connected_to != to->ToString()) drop();
    if (!client) {
      auto c = RpcClient::Connect(*to, trust_, "node " + std::to_string(job->config.node_rank));
      if (!c.ok()) {
        Log()->debug("sync call: {}", c.status().message());
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      MutexLock l(&socket_mu_);
      client = std::move(*c);
      connected_to = to->ToString();
      socket_ = &client->socket();
      if (stopped_.load()) client->socket().Shutdown();  // Stop() came first (no hook here)
    }
    wire::SyncRequest req;
    req.job = job->config.job_name;
    req.node = job->config.node_rank;
    req.step = node_step_.load();
    req.rate = node_rate_.load();
    req.generation = generation;
    req.collect = collect;
    req.wait = std::chrono::milliseconds(kSyncWait);
    req.round = job->round;
    auto r = client->Call(req.ToJson(), kSyncWait + std::chrono::seconds(5));
    if (!r.ok()) {
      Log()->debug("sync call: {}", r.status().message());
      drop();
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    StatusOr<wire::SyncDecision> decision = wire::SyncDecision::FromJson(*r);
    if (!decision.ok()) {
      Log()->warn("reply to a sync call from {}: {}", connected_to, decision.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // not a tight loop
      continue;
    }
    collect = decision->collect;  // the next call reports to it
    generation = decision->generation;
    if (decision->step) {
      if (decision->round == job->round) {
        Apply(*decision);
      } else {  // decided for a round this node is joining: ask again once registered
        generation = 0;
        std::this_thread::sleep_for(kSlotPoll);
      }
    }
  }
  drop();
}

// Publishes a decided on-demand step in the sync map. Withdrawals are local
// (a new incarnation, or every rank served it), never the coordinator's: a
// rank here may not have reached the step when another node's restarted
// ranks begin the next round.
void OnDemandSync::Apply(const wire::SyncDecision& decision) {
  if (!decision.step) return;
  const int64_t step = *decision.step;
  const auto ranks = LiveRanks();
  MutexLock l(&mu_);
  if (decision.generation == generation_) return;  // this decision was taken in already
  generation_ = decision.generation;
  if (step == published_) return;
  pids_.clear();
  for (auto [i, pid] : ranks) pids_.push_back(pid);
  published_ = step;
  step_ = step;
  decided_at_ = clock_->Now();
  map_.Publish(step, decision.notice_unix_ms);
  metric::OnDemandSaves().Add();
  // From the step the notified node had reached at the notice; from this
  // node's own newest step when the coordinator does not say.
  const int64_t at_notice = decision.notice_step.value_or(node_step_.load());
  if (at_notice >= 0 && step >= at_notice) {
    metric::OnDemandStepDistance().Observe(static_cast<double>(step - at_notice));
  }
  Log()->info("on-demand step {} published to {} rank(s) here (notice from {})", step, pids_.size(),
              decision.origin.empty() ? "?" : decision.origin);
}

void OnDemandSync::Withdraw(const char* why) {
  if (published_ == kNoSyncStep) return;
  Log()->info("on-demand step {} withdrawn: {}", published_, why);
  published_ = kNoSyncStep;
  pids_.clear();
  map_.Publish(kNoSyncStep, 0);
}

}  // namespace strata::agent
