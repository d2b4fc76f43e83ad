// Copyright 2026 The Strata Authors.
#include "agent/transfer.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "strata/env.h"
#include "util/hash.h"

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

namespace {

constexpr auto kFetchCallTimeout = std::chrono::seconds(30);

// Asks for the files of `group` of the copy with `index`'s digest on
// `client`'s connection and receives them into `dir`.
Status FetchGroup(RpcClient& client, const StepKey& key, const StepIndex& index,
                  const std::vector<size_t>& group, const std::string& dir, Store* store) {
  json call = {{"op", "fetch_step"},
               {"key", StepKeyToJson(key)},
               {"digest", Hex64(index.digest)},
               {"files", group}};
  STRATA_RETURN_IF_ERROR(client.Call(call, kFetchCallTimeout).status());
  return RecvStepFiles(client.socket(), dir, SubIndex(index, group), store);
}

// Receives every group, the first on `first` and each other one on a
// connection of its own, in parallel.
Status FetchGroups(RpcClient& first, const Endpoint& to, const std::string& secret,
                   const std::string& client_id, const StepKey& key, const FetchedCopy& copy,
                   const std::vector<std::vector<size_t>>& groups, Store* store) {
  std::vector<Status> results(groups.size());
  std::vector<std::thread> receivers;
  for (size_t g = 1; g < groups.size(); ++g) {
    receivers.emplace_back([&, g] {
      auto client = RpcClient::Connect(to, secret, client_id);
      results[g] = client.ok() ? FetchGroup(*client, key, copy.index, groups[g], copy.dir, store)
                               : client.status();
    });
  }
  results[0] = FetchGroup(first, key, copy.index, groups[0], copy.dir, store);
  for (auto& t : receivers) t.join();
  for (const Status& s : results) STRATA_RETURN_IF_ERROR(s);
  return Status::Ok();
}

}  // namespace

StatusOr<FetchedCopy> FetchCopy(const Endpoint& to, const std::string& secret,
                                const std::string& client_id, const StepKey& key, int streams,
                                Store* store) {
  STRATA_ASSIGN_OR_RETURN(RpcClient client, RpcClient::Connect(to, secret, client_id));
  STRATA_ASSIGN_OR_RETURN(
      json reply,
      client.Call({{"op", "get_index"}, {"key", StepKeyToJson(key)}}, kFetchCallTimeout));
  FetchedCopy copy;
  STRATA_ASSIGN_OR_RETURN(
      copy.index, StepIndexFromJson(reply.value("index", json()),
                                    "index of " + key.ToString() + " from " + to.ToString()));
  const auto groups = copy.index.total_bytes >= kMultiStreamMinBytes
                          ? PartitionFiles(copy.index, streams)
                          : PartitionFiles(copy.index, 1);
  STRATA_ASSIGN_OR_RETURN(copy.dir, store->NewIncomingDir());
  Status s = groups.empty() ? Status::Ok()
                            : FetchGroups(client, to, secret, client_id, key, copy, groups, store);
  if (!s.ok()) {
    Env::Default()->RemoveAll(copy.dir).IgnoreError();
    return s.WithContext("fetching " + key.ToString() + " from " + to.ToString());
  }
  return copy;
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
