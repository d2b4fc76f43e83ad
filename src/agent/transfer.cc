// Copyright 2026 The Strata Authors.
#include "agent/transfer.h"

#include <algorithm>
#include <numeric>

namespace strata::agent {

std::vector<std::vector<size_t>> PartitionFiles(const StepIndex& index, int streams) {
  const size_t n = std::min(index.files.size(), static_cast<size_t>(std::max(streams, 1)));
  std::vector<std::vector<size_t>> groups(n);
  if (n == 0) return groups;
  std::vector<size_t> order(index.files.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return index.files[a].size > index.files[b].size; });
  std::vector<uint64_t> load(n, 0);
  for (size_t f : order) {
    size_t g = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    groups[g].push_back(f);
    load[g] += index.files[f].size;
  }
  for (auto& g : groups) std::sort(g.begin(), g.end());
  return groups;
}

StepIndex SubIndex(const StepIndex& index, const std::vector<size_t>& positions) {
  StepIndex sub;
  sub.strata = index.strata;
  sub.digest = index.digest;
  for (size_t p : positions) {
    sub.files.push_back(index.files.at(p));
    sub.total_bytes += index.files.at(p).size;
  }
  return sub;
}

uint64_t TransferTable::Begin(std::string dir, StepIndex index) {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t id = next_id_++;
  active_[id] = Transfer{std::move(dir), std::move(index), 0, Status::Ok()};
  return id;
}

Status TransferTable::Lookup(uint64_t id, std::string* dir, StepIndex* index) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = active_.find(id);
  if (it == active_.end())
    return NotFoundError("no transfer " + std::to_string(id) + " in progress");
  *dir = it->second.dir;
  *index = it->second.index;
  return Status::Ok();
}

void TransferTable::Finish(uint64_t id, size_t files, const Status& status) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = active_.find(id);
    if (it == active_.end()) return;
    it->second.arrived += files;
    if (!status.ok() && it->second.error.ok()) it->second.error = status;
  }
  cv_.notify_all();
}

Status TransferTable::Wait(uint64_t id, std::chrono::milliseconds stall) {
  std::unique_lock<std::mutex> l(mu_);
  size_t seen = 0;
  for (;;) {
    auto it = active_.find(id);
    if (it == active_.end()) return NotFoundError("transfer " + std::to_string(id) + " vanished");
    const Transfer& t = it->second;
    if (!t.error.ok()) return t.error;
    if (t.arrived >= t.index.files.size()) return Status::Ok();
    if (t.arrived == seen && cv_.wait_for(l, stall) == std::cv_status::timeout &&
        active_.at(id).arrived == seen && active_.at(id).error.ok()) {
      return DeadlineExceededError("transfer " + std::to_string(id) +
                                   " stalled: " + std::to_string(seen) + " of " +
                                   std::to_string(t.index.files.size()) + " files arrived");
    }
    seen = active_.at(id).arrived;
  }
}

void TransferTable::End(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  active_.erase(id);
}

}  // namespace strata::agent
