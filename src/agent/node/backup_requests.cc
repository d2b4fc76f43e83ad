// Copyright 2026 The Strata Authors.
#include "agent/node/backup_requests.h"

namespace strata::agent {

std::optional<int64_t> BackupRequests::Add(const wire::StepKey& key) {
  MutexLock l(&mu_);
  if (key.job != job_ || key.rank != rank_) {  // another job: its requests are moot
    job_ = key.job;
    rank_ = key.rank;
    own_.clear();
    listed_.clear();
  }
  std::optional<int64_t> displaced;
  if (!own_.count(key.step) && own_.size() >= wire::kMaxRequestedBackups) {
    displaced = *own_.begin();
    own_.erase(own_.begin());
  }
  own_.insert(key.step);
  return displaced;
}

void BackupRequests::FillReport(const std::string& job, const std::function<bool(int64_t)>& held,
                                int64_t newest_ingested, wire::ReplicatedRequest* report) const {
  std::set<int64_t> steps;
  {
    MutexLock l(&mu_);
    if (job != job_) return;
    steps = own_;
    steps.insert(listed_.begin(), listed_.end());
  }
  for (int64_t step : steps) {  // held() reads the store: no lock of ours held
    if (held(step)) {
      report->requested.insert(step);
    } else if (newest_ingested > step) {
      report->requested_missing.insert(step);
    }
  }
}

void BackupRequests::OnReply(const wire::ReplicatedRequest& sent,
                             const wire::ReplicatedReply& reply) {
  MutexLock l(&mu_);
  if (sent.job != job_) return;
  for (int64_t step : sent.requested) {
    if (!reply.requested.count(step)) own_.erase(step);
  }
  for (int64_t step : sent.requested_missing) own_.erase(step);
  listed_ = reply.requested;
}

std::set<wire::StepKey> BackupRequests::Pins() const {
  MutexLock l(&mu_);
  std::set<wire::StepKey> pins;
  for (int64_t step : own_) pins.insert({job_, rank_, step});
  for (int64_t step : listed_) pins.insert({job_, rank_, step});
  return pins;
}

void BackupRequests::Restored(const std::string& job, int rank, int64_t step) {
  MutexLock l(&mu_);
  if (job != job_ || rank != rank_) {
    job_ = job;
    rank_ = rank;
    own_.clear();
    listed_.clear();
    return;
  }
  own_.erase(own_.upper_bound(step), own_.end());
  listed_.erase(listed_.upper_bound(step), listed_.end());
}

}  // namespace strata::agent
