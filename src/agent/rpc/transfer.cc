// Copyright 2026 The Strata Authors.
#include "agent/rpc/transfer.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <system_error>
#include <thread>

#include "agent/rpc/step_stream.h"
#include "agent/store/stream_verify.h"
#include "format/manifest.h"
#include "format/naming.h"
#include "strata/env.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "wire/data.h"

namespace strata::agent {

std::vector<std::vector<size_t>> PartitionFiles(const StepIndex& index, int streams) {
  std::vector<size_t> all(index.files.size());
  std::iota(all.begin(), all.end(), 0);
  return PartitionFiles(index, all, streams);
}

std::vector<std::vector<size_t>> PartitionFiles(const StepIndex& index,
                                                const std::vector<size_t>& positions, int streams) {
  const size_t n = std::min(positions.size(), static_cast<size_t>(std::max(streams, 1)));
  std::vector<std::vector<size_t>> groups(n);
  if (n == 0) return groups;
  std::vector<size_t> order = positions;
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
// Threads that verify a fetch while it arrives: each hashes far faster than
// one stream delivers.
constexpr int kVerifyThreads = 2;

// Asks for the files of `group` of the copy with `index`'s digest on
// `client`'s connection and receives them into `dir`, submitting checks to
// `verifier` (if any) as their bytes arrive.
Status FetchGroup(RpcClient& client, const wire::StepKey& key, const StepIndex& index,
                  const std::vector<size_t>& group, const std::string& dir, Store* store,
                  StreamVerifier* verifier) {
  const wire::FetchStepRequest call{key, index.digest, group};
  STRATA_RETURN_IF_ERROR(client.Call(call.ToJson(), kFetchCallTimeout).status());
  return RecvStepFiles(client.socket(), dir, SubIndex(index, group), store, verifier);
}

// Fetches the manifest of a Strata copy on `client` (before its data, which
// it describes) and decodes it.
StatusOr<StepInfo> FetchManifest(RpcClient& client, const wire::StepKey& key,
                                 const FetchedCopy& copy, size_t position, Store* store) {
  STRATA_RETURN_IF_ERROR(FetchGroup(client, key, copy.index, {position}, copy.dir, store, nullptr));
  const std::string path = JoinPath(copy.dir, std::string(kManifestFileName));
  STRATA_ASSIGN_OR_RETURN(std::string bytes,
                          ReadFileToString(store->env(), path, kMaxManifestBytes));
  return DecodeManifest(bytes, path);
}

// FAILED_PRECONDITION unless the holder's copy is the one asked for.
Status CheckDigest(const StepIndex& index, std::optional<uint64_t> digest) {
  if (!digest || index.digest == *digest) return Status::Ok();
  return FailedPreconditionError("the holder has another copy (digest " + Hex64(index.digest) +
                                 ") than the one planned (" + Hex64(*digest) + ")");
}

// Where the manifest of a Strata copy is in its index.
StatusOr<size_t> ManifestPosition(const StepIndex& index) {
  for (size_t p = 0; p < index.files.size(); ++p) {
    if (index.files[p].path == kManifestFileName) return p;
  }
  return DataLossError("the index of a Strata checkpoint lists no " +
                       std::string(kManifestFileName));
}

// Receives every group, each on one of `clients`, in parallel. The first
// stream to fail shuts the others' connections down, so a failed fetch
// ends at once instead of waiting for the slowest stream.
Status FetchGroups(std::vector<RpcClient>& clients, const wire::StepKey& key,
                   const FetchedCopy& copy, const std::vector<std::vector<size_t>>& groups,
                   Store* store, StreamVerifier* verifier) {
  return RunParallel(
      groups.size(), groups.size(),
      [&](size_t g, const auto&) {
        return FetchGroup(clients[g], key, copy.index, groups[g], copy.dir, store, verifier);
      },
      [&](const Status&) {
        for (RpcClient& c : clients) c.socket().Abort();
      });
}

// get_index; for a Strata copy its manifest; then the other files in groups
// over up to `streams` connections, verified while they arrive.
Status FetchInGroups(const Endpoint& to, const net::Trust& trust, const std::string& client_id,
                     const wire::StepKey& key, int streams, Store* store,
                     std::optional<uint64_t> digest, FetchedCopy* copy) {
  std::vector<RpcClient> clients;
  STRATA_ASSIGN_OR_RETURN(RpcClient first, RpcClient::Connect(to, trust, client_id));
  clients.push_back(std::move(first));
  STRATA_ASSIGN_OR_RETURN(json reply,
                          clients[0].Call(wire::GetIndexRequest{key}.ToJson(), kFetchCallTimeout));
  STRATA_ASSIGN_OR_RETURN(wire::IndexReply held, wire::IndexReply::FromJson(reply));
  copy->index = std::move(held.index);
  STRATA_RETURN_IF_ERROR(CheckDigest(copy->index, digest));
  STRATA_ASSIGN_OR_RETURN(copy->dir, store->NewIncomingDir());
  std::vector<size_t> rest(copy->index.files.size());
  std::iota(rest.begin(), rest.end(), 0);
  std::optional<StepInfo> manifest;
  if (copy->index.strata) {
    STRATA_ASSIGN_OR_RETURN(size_t position, ManifestPosition(copy->index));
    if (copy->index.files[position].size > kMaxManifestBytes) {
      return DataLossError("the index gives the manifest " +
                           std::to_string(copy->index.files[position].size) + " bytes");
    }
    STRATA_ASSIGN_OR_RETURN(manifest, FetchManifest(clients[0], key, *copy, position, store));
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(position));
    clients.clear();  // the holder closes a connection after a fetch
  }
  STRATA_ASSIGN_OR_RETURN(wire::RangePlan plan,
                          PlanRangeChecks(copy->index, manifest ? &*manifest : nullptr));
  StreamVerifier verifier(copy->dir, copy->index, std::move(plan), kVerifyThreads);
  const auto groups = PartitionFiles(copy->index, rest,
                                     copy->index.total_bytes >= kMultiStreamMinBytes ? streams : 1);
  while (clients.size() < groups.size()) {
    STRATA_ASSIGN_OR_RETURN(RpcClient c, RpcClient::Connect(to, trust, client_id));
    clients.push_back(std::move(c));
  }
  // A range that does not match ends the transfer: the copy is corrupt, and
  // the rest of it is not worth receiving.
  verifier.SetOnFailure([&clients] {
    for (RpcClient& c : clients) c.socket().Abort();
  });
  Status received =
      groups.empty() ? Status::Ok() : FetchGroups(clients, key, *copy, groups, store, &verifier);
  // A failed check explains a stream cut short by it.
  STRATA_RETURN_IF_ERROR(verifier.Wait());
  STRATA_RETURN_IF_ERROR(received);
  STRATA_RETURN_IF_ERROR(verifier.Finish());
  copy->data_verified = true;
  return Status::Ok();
}

// The whole step on one connection: fetch_step without "files", which
// agents without get_index serve too.
Status FetchWhole(const Endpoint& to, const net::Trust& trust, const std::string& client_id,
                  const wire::StepKey& key, Store* store, std::optional<uint64_t> digest,
                  FetchedCopy* copy) {
  STRATA_ASSIGN_OR_RETURN(RpcClient client, RpcClient::Connect(to, trust, client_id));
  STRATA_ASSIGN_OR_RETURN(
      json reply, client.Call(wire::FetchStepRequest{key, {}, {}}.ToJson(), kFetchCallTimeout));
  STRATA_ASSIGN_OR_RETURN(wire::IndexReply held, wire::IndexReply::FromJson(reply));
  copy->index = std::move(held.index);
  STRATA_RETURN_IF_ERROR(CheckDigest(copy->index, digest));
  STRATA_ASSIGN_OR_RETURN(copy->dir, store->NewIncomingDir());
  return RecvStepFiles(client.socket(), copy->dir, copy->index, store);
}

// Removes what a failed attempt received.
void Discard(Store* store, FetchedCopy* copy) {
  if (!copy->dir.empty()) store->env()->RemoveAll(copy->dir).IgnoreError();
  *copy = FetchedCopy();
}

}  // namespace

StatusOr<FetchedCopy> FetchCopy(const Endpoint& to, const net::Trust& trust,
                                const std::string& client_id, const wire::StepKey& key, int streams,
                                Store* store, std::optional<uint64_t> digest) {
  const std::string what = "fetching " + key.ToString() + " from " + to.ToString();
  FetchedCopy copy;
  Status s = FetchInGroups(to, trust, client_id, key, streams, store, digest, &copy);
  if (!s.ok()) Discard(store, &copy);
  // A holder without the copy says so, and a corrupt copy stays corrupt;
  // any other failure (a stream refused or cut, an agent that does not know
  // get_index) gets one more try, on one connection, before the holder
  // counts as failed. That copy is verified when it is committed.
  if (!s.ok() && s.code() != StatusCode::kNotFound && s.code() != StatusCode::kDataLoss) {
    Log()->warn("{} in groups: {}; again on one connection", what, s.message());
    s = FetchWhole(to, trust, client_id, key, store, digest, &copy);
    if (!s.ok()) Discard(store, &copy);
  }
  if (!s.ok()) return s.WithContext(what);
  return copy;
}

Status AdoptCopy(Store* store, const wire::StepKey& key, const FetchedCopy& copy) {
  Status s = copy.data_verified ? store->AdoptVerified(copy.dir, key, copy.index)
                                : store->Adopt(copy.dir, key, copy.index);
  if (!s.ok()) store->env()->RemoveAll(copy.dir).IgnoreError();
  return s;
}

uint64_t TransferTable::Begin(std::string dir, StepIndex index,
                              std::vector<std::vector<wire::FileRange>> need) {
  MutexLock l(&mu_);
  uint64_t id = next_id_++;
  Transfer& t = active_[id];
  t.dir = std::move(dir);
  t.index = std::move(index);
  t.claimed.assign(need.size(), false);
  t.need = std::move(need);
  return id;
}

StatusOr<std::vector<wire::FileRange>> TransferTable::ClaimGroup(uint64_t id, size_t group) {
  MutexLock l(&mu_);
  auto it = active_.find(id);
  if (it == active_.end())
    return NotFoundError("no transfer " + std::to_string(id) + " in progress");
  Transfer& t = it->second;
  if (group >= t.need.size() || t.claimed[group]) {
    return InvalidArgumentError("transfer " + std::to_string(id) + " has no group " +
                                std::to_string(group) + " left to send");
  }
  t.claimed[group] = true;
  return t.need[group];
}

Status TransferTable::Lookup(uint64_t id, std::string* dir, StepIndex* index) {
  MutexLock l(&mu_);
  auto it = active_.find(id);
  if (it == active_.end())
    return NotFoundError("no transfer " + std::to_string(id) + " in progress");
  *dir = it->second.dir;
  *index = it->second.index;
  return Status::Ok();
}

void TransferTable::Finish(uint64_t id, size_t parts, const Status& status) {
  {
    MutexLock l(&mu_);
    auto it = active_.find(id);
    if (it == active_.end()) return;
    it->second.arrived += parts;
    if (!status.ok() && it->second.error.ok()) it->second.error = status;
  }
  cv_.SignalAll();
}

Status TransferTable::Wait(uint64_t id, std::chrono::milliseconds stall) {
  MutexLock l(&mu_);
  size_t seen = 0;
  for (;;) {
    auto it = active_.find(id);
    if (it == active_.end()) return NotFoundError("transfer " + std::to_string(id) + " vanished");
    const Transfer& t = it->second;
    if (!t.error.ok()) return t.error;
    if (t.arrived >= t.parts()) return Status::Ok();
    if (t.arrived == seen && !cv_.WaitFor(&mu_, stall) && active_.at(id).arrived == seen &&
        active_.at(id).error.ok()) {
      return DeadlineExceededError(
          "transfer " + std::to_string(id) + " stalled: " + std::to_string(seen) + " of " +
          std::to_string(t.parts()) + (t.need.empty() ? " files" : " range groups") + " arrived");
    }
    seen = active_.at(id).arrived;
  }
}

void TransferTable::End(uint64_t id) {
  MutexLock l(&mu_);
  active_.erase(id);
}

}  // namespace strata::agent
