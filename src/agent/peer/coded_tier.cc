// Copyright 2026 The Strata Authors.
#include "agent/peer/coded_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "agent/metrics/agent_metrics.h"
#include "agent/peer/retention.h"
#include "agent/rpc/step_stream.h"
#include "ec/codec.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/scratch.h"
#include "util/thread_pool.h"
#include "util/unique_fd.h"

namespace strata::agent {
namespace {

constexpr size_t kHashBlock = 4 << 20;

// XXH3-64 of `ranges` of the files of `index` under `dir`, in order.
StatusOr<uint64_t> HashRanges(const std::string& dir, const StepIndex& index,
                              const std::vector<wire::FileRange>& ranges) {
  uint64_t total = 0;
  for (const wire::FileRange& r : ranges) total += r.length;
  Scratch buf(total, kHashBlock);  // every contribution hashes its chunks
  Xxh3Stream hash;
  for (const wire::FileRange& r : ranges) {
    const std::string path = JoinPath(dir, index.files[r.file].path);
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoToStatus(errno, "open " + path);
    Status s;
    for (uint64_t done = 0; done < r.length && s.ok();) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), r.length - done));
      ssize_t got = ::pread(fd.get(), buf.get(), n, static_cast<off_t>(r.offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        s = got < 0 ? ErrnoToStatus(errno, "read " + path) : DataLossError(path + " is short");
        break;
      }
      hash.Update(buf.get(), static_cast<size_t>(got));
      done += static_cast<uint64_t>(got);
    }
    STRATA_RETURN_IF_ERROR(s);
  }
  return hash.Digest();
}

// Where chunk `chunk` of a step of `bytes` bytes lies in its stream, for a
// group of k data shards: [offset, offset + length), length 0 past the end.
std::pair<uint64_t, uint64_t> ChunkSpan(uint64_t bytes, int k, int chunk) {
  const uint64_t cb = ec::ChunkBytes(bytes, k);
  const uint64_t offset = std::min(bytes, cb * static_cast<uint64_t>(chunk));
  return {offset, std::min(cb, bytes - offset)};
}

std::string Address(const std::map<int, std::string>& addresses, int node) {
  auto it = addresses.find(node);
  return it == addresses.end() ? std::string() : it->second;
}

// A kept connection's first reply: no longer than a new connection's
// handshake may take (RpcClient::Connect), so that a holder cut off is
// found as soon as with a new one.
constexpr auto kReusedConnectionTimeout = std::chrono::seconds(5);

}  // namespace

struct CodedTier::Chunk {
  int index = 0;  // of the step's k chunks
  int stripe = 0;
  uint64_t length = 0;
  std::vector<wire::FileRange> ranges;
  uint64_t xxh3 = 0;
};

CodedTier::CodedTier(Options options, Store* store, ParityStore* parity, SteadyClock* clock)
    : options_(std::move(options)),
      store_(store),
      parity_(parity),
      clock_(clock),
      connections_(options_.trust, static_cast<size_t>(std::max(1, options_.data_streams))) {}

// A chunk's receiver can check it only against the checksum its sender
// computes: the sender reads and verifies its step before any chunk leaves.
Status CodedTier::VerifyOnce(const wire::StepKey& key) {
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(key));
  {
    MutexLock l(&mu_);
    if (verified_ && verified_->first == key && verified_->second == index.digest) {
      return Status::Ok();
    }
  }
  Status s = store_->Verify(key);
  if (!s.ok()) return s.WithContext("verifying " + key.ToString() + " before coding it");
  MutexLock l(&mu_);
  verified_ = {key, index.digest};
  return Status::Ok();
}

Status CodedTier::Contribute(const wire::StepKey& key, const ec::Group& group,
                             const std::map<int, std::string>& addresses,
                             std::vector<std::string>* done,
                             const net::Cancellation::Ticket& ticket) {
  const int me = group.Position(key.rank);
  if (me < 0) {
    return InvalidArgumentError("node " + std::to_string(key.rank) + " is not in group " +
                                group.ToString());
  }
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(key));
  STRATA_RETURN_IF_ERROR(VerifyOnce(key));
  const ec::GroupLayout layout = group.layout();
  const std::string dir = store_->StepPath(key);
  std::vector<Chunk> chunks(static_cast<size_t>(group.k()));
  for (int c = 0; c < group.k(); ++c) {
    Chunk& chunk = chunks[static_cast<size_t>(c)];
    chunk.index = c;
    chunk.stripe = layout.DataStripes(me)[static_cast<size_t>(c)];
    auto [offset, length] = ChunkSpan(index.total_bytes, group.k(), c);
    chunk.length = length;
    chunk.ranges = wire::StreamSlice(index, offset, length);
  }
  const size_t streams = static_cast<size_t>(std::max(1, options_.data_streams));
  STRATA_RETURN_IF_ERROR(RunParallel(chunks.size(), streams, [&](size_t c, const auto&) {
    STRATA_ASSIGN_OR_RETURN(chunks[c].xxh3, HashRanges(dir, index, chunks[c].ranges));
    return Status::Ok();
  }));
  // Every (chunk, row): m holders per chunk. Each is tried; the first
  // failure is the answer, the holders that took all of theirs are `done`.
  struct Task {
    const Chunk* chunk;
    int row;
    int holder;
    Status result;
  };
  std::vector<Task> tasks;
  for (const Chunk& chunk : chunks) {
    for (int row = 0; row < group.m; ++row) {
      const int holder = group.members[layout.ParityHolders(chunk.stripe)[row]];
      tasks.push_back({&chunk, row, holder, Status::Ok()});
    }
  }
  RunParallel(tasks.size(), streams, [&](size_t i, const auto&) {
    Task& t = tasks[i];
    const std::string address = Address(addresses, t.holder);
    if (ticket.cancelled()) {
      t.result = CancelledError("cancelled");
    } else if (address.empty()) {
      t.result = UnavailableError("no address for node " + std::to_string(t.holder));
    } else {
      t.result = Send(*t.chunk, key, index, group, t.chunk->stripe, t.row, address, ticket);
    }
    return Status::Ok();
  }).IgnoreError();
  if (ticket.cancelled()) {  // what failed, failed for it
    return CancelledError("coding " + key.ToString() + " for group " + group.ToString() +
                          ": cancelled");
  }
  std::map<int, bool> holder_ok;
  Status first;
  for (const Task& t : tasks) {
    auto [it, fresh] = holder_ok.emplace(t.holder, true);
    if (t.result.ok()) continue;
    it->second = false;
    if (first.ok()) {
      first = t.result.WithContext("chunk " + std::to_string(t.chunk->index) + " of " +
                                   key.ToString() + " to node " + std::to_string(t.holder) +
                                   " (stripe " + std::to_string(t.chunk->stripe) + ", row " +
                                   std::to_string(t.row) + ")");
    }
  }
  for (const auto& [holder, ok] : holder_ok) {
    if (ok && done != nullptr) done->push_back(Address(addresses, holder));
  }
  return first;
}

Status CodedTier::Send(const Chunk& chunk, const wire::StepKey& key, const StepIndex& index,
                       const ec::Group& group, int stripe, int row, const std::string& address,
                       const net::Cancellation::Ticket& ticket) {
  STRATA_ASSIGN_OR_RETURN(Endpoint to, ParseEndpoint(address));
  const std::string who = "node " + std::to_string(key.rank);
  const SteadyClock::time_point began = clock_->Now();
  wire::PutShardRequest put;
  put.key = key;
  put.digest = index.digest;
  put.index = index;
  put.group = group;
  put.stripe = stripe;
  put.row = row;
  put.chunk = chunk.index;
  put.length = chunk.length;
  put.xxh3 = chunk.xxh3;
  // A kept connection the holder closed or a partition cut fails within
  // the time a new one is given, and the call goes on a new one.
  STRATA_ASSIGN_OR_RETURN(
      RpcPool::Opened opened,
      connections_.Open(to, who, put.ToJson(), kCallTimeout, kReusedConnectionTimeout, ticket));
  STRATA_ASSIGN_OR_RETURN(json reply, std::move(opened.reply));
  STRATA_ASSIGN_OR_RETURN(wire::PutShardReady ready, wire::PutShardReady::FromJson(reply));
  if (!ready.have) {
    const net::Cancellation::Registration registered(ticket, opened.client.socket());
    STRATA_RETURN_IF_ERROR(
        SendRanges(opened.client.socket(), store_->StepPath(key), index, chunk.ranges));
    STRATA_RETURN_IF_ERROR(AwaitCommitted(opened.client.socket(), address));
    metric::ReplicationSeconds(address).Observe(SecondsSince(*clock_, began));
    metric::ReplicationBytes(address).Add(static_cast<double>(chunk.length));
  }
  // Not given back when cancelled: the connection may be out of step.
  if (ticket.cancelled()) return CancelledError("cancelled");
  connections_.GiveBack(to, who, std::move(opened.client));  // in step: its last reply was read
  return Status::Ok();
}

StatusOr<json> CodedTier::HandlePutShard(const wire::PutShardRequest& request, net::Socket& socket,
                                         int my_rank) {
  const ec::Group& g = request.group;
  const int holder = g.members[g.layout().ParityHolders(request.stripe)[request.row]];
  if (holder != my_rank) {
    return FailedPreconditionError("row " + std::to_string(request.row) + " of stripe " +
                                   std::to_string(request.stripe) + " of group " + g.ToString() +
                                   " is node " + std::to_string(holder) + "'s, not node " +
                                   std::to_string(my_rank) + "'s");
  }
  ParityHeader where;
  where.job = request.key.job;
  where.step = request.key.step;
  where.group = g;
  where.stripe = request.stripe;
  where.row = request.row;
  const ParityKey key = where.key();
  if (parity_->Has(key, request.key.rank, request.digest)) {
    return wire::PutShardReady{true}.ToJson();
  }
  // The new shard is written beside the old one before it replaces it.
  uint64_t bytes = request.length;
  if (auto held = parity_->Get(key); held.ok()) bytes = std::max(bytes, held->length);
  STRATA_RETURN_IF_ERROR(CheckRoomToReceive(options_.local_dir, bytes, "parity " + key.ToString()));
  STRATA_RETURN_IF_ERROR(SendReply(socket, wire::PutShardReady{false}.ToJson()));
  wire::Contribution c{request.key.rank, request.chunk,  request.length,
                       request.xxh3,     request.digest, request.index};
  const net::StallLimitScope stall(socket, kDataStallLimit);  // a silent sender holds the lock
  const net::Deadline deadline = DataDeadline();
  auto added = parity_->Contribute(
      where, c, [&](void* buf, size_t n) { return socket.RecvAll(buf, n, deadline); },
      [&socket] { socket.Abort(); });
  if (!added.ok()) {  // closes the connection
    return DataLossError("adding chunk " + std::to_string(request.chunk) + " of " +
                         request.key.ToString() + " from " + socket.peer() + " to parity " +
                         key.ToString() + ": " + added.status().message());
  }
  Log()->debug("parity {}: took chunk {} of {} ({} bytes)", key.ToString(), request.chunk,
               request.key.ToString(), request.length);
  return json{{"committed", true}};
}

StatusOr<json> CodedTier::HandleGetShard(const wire::GetShardRequest& request,
                                         net::Socket& socket) {
  if (request.parity) {
    const ParityKey key{request.key.job, request.key.step, request.group.Id(), request.stripe,
                        request.row};
    STRATA_ASSIGN_OR_RETURN(ParityHeader h, parity_->Get(key));
    wire::ShardReply reply{h.length, h.xxh3, {}, {}};
    for (const wire::Contribution& c : h.contributions) {
      reply.contributions.push_back({c.rank, c.chunk, c.length, c.xxh3, c.step_digest, {}});
    }
    if (request.index_of) {
      const wire::Contribution* c = h.Find(*request.index_of);
      if (c == nullptr) {
        return NotFoundError("parity " + key.ToString() + " holds nothing of node " +
                             std::to_string(*request.index_of));
      }
      reply.index = c->index;
    }
    STRATA_RETURN_IF_ERROR(SendReply(socket, reply.ToJson()));
    if (request.header_only) return json{{"closed", true}};
    const std::string path = parity_->PathOf(key);
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoToStatus(errno, "open " + path);
    Status s = socket.SendFile(fd.get(), 0, h.length, DataDeadline());
    if (!s.ok()) return s.WithContext("serving parity " + key.ToString() + " to " + socket.peer());
    return json{{"closed", true}};  // the data was the answer
  }
  STRATA_ASSIGN_OR_RETURN(StepIndex index, store_->GetIndex(request.key));
  if (index.digest != request.digest) {
    return FailedPreconditionError("this node holds another copy of " + request.key.ToString() +
                                   " (digest " + Hex64(index.digest) + ") than the one coded (" +
                                   Hex64(request.digest) + ")");
  }
  auto [offset, length] = ChunkSpan(index.total_bytes, request.group.k(), request.chunk);
  STRATA_RETURN_IF_ERROR(SendReply(socket, wire::ShardReply{length, 0, {}, {}}.ToJson()));
  Status s = SendRanges(socket, store_->StepPath(request.key), index,
                        wire::StreamSlice(index, offset, length));
  if (!s.ok()) return s.WithContext("serving a chunk of " + request.key.ToString());
  return json{{"closed", true}};
}

std::set<int64_t> CodedTier::StepsCodedByOthers(const std::string& job,
                                                const ec::Group& group) const {
  const std::string id = group.Id();
  std::set<int64_t> steps;
  for (const auto& [key, h] : parity_->List()) {
    if (key.job == job && key.group == id && !h.contributions.empty()) steps.insert(key.step);
  }
  return steps;
}

std::vector<wire::HeldParity> CodedTier::Inventory(const std::string& job) const {
  std::vector<wire::HeldParity> out;
  for (const auto& [key, h] : parity_->List()) {
    if (key.job != job || !h.complete()) continue;
    wire::HeldParity p{h.step, h.group, h.stripe, h.row, {}};
    for (const wire::Contribution& c : h.contributions) p.digests[c.rank] = c.step_digest;
    out.push_back(std::move(p));
  }
  return out;
}

void CodedTier::CollectGarbage(const std::string& job, int64_t floor, bool bounded,
                               int64_t previous_floor) {
  const auto held = parity_->List();
  int64_t newest_complete = -1;
  std::set<int64_t> steps;
  for (const auto& [key, h] : held) {
    if (key.job != job) continue;
    steps.insert(key.step);
    if (h.complete()) newest_complete = std::max(newest_complete, key.step);
  }
  const std::set<int64_t> keep = StepsToKeep(steps, floor, bounded, previous_floor);
  for (const auto& [key, h] : held) {
    if (key.job == job && (keep.count(key.step) || key.step == newest_complete)) continue;
    Log()->debug("gc: removing parity {}", key.ToString());
    RemoveShard(key);
  }
}

std::map<ParityKey, ParityHeader> CodedTier::ListAbove(const std::string& job, int64_t step) const {
  std::map<ParityKey, ParityHeader> out;
  for (auto& [key, h] : parity_->List()) {
    if (key.job == job && key.step > step) out.emplace(key, std::move(h));
  }
  return out;
}

int CodedTier::DiscardListed(const std::map<ParityKey, ParityHeader>& listed) {
  int removed = 0;
  for (const auto& [key, header] : listed) removed += RemoveShard(key, &header);
  return removed;
}

// Not waiting for a contribution being written: its sender may take up to
// the data deadline (two minutes once it is silent, kDataStallLimit), and
// every collection on this node waits for this one (the RAM disk fills
// meanwhile). The next collection takes it.
bool CodedTier::RemoveShard(const ParityKey& key, const ParityHeader* listed) {
  Status s = parity_->RemoveIfIdle(key, listed);
  if (s.code() == StatusCode::kUnavailable) {
    Log()->debug("gc: {}; left for the next collection", s.message());
  } else if (s.code() == StatusCode::kFailedPrecondition) {
    Log()->debug("gc: {}; kept", s.message());
  } else if (!s.ok()) {
    Log()->warn("gc: removing parity {}: {}", key.ToString(), s.message());
  }
  return s.ok();
}

}  // namespace strata::agent
