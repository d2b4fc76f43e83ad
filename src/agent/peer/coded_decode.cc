// Copyright 2026 The Strata Authors.
//
// CodedTier's restore side: a lost member's step rebuilt from its group's
// shards (coded_tier.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <set>

#include "agent/peer/coded_tier.h"
#include "agent/rpc/step_stream.h"
#include "ec/codec.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/thread_pool.h"
#include "util/unique_fd.h"

namespace strata::agent {
namespace {

constexpr size_t kDecodeBudget = 64 << 20;  // one stripe's buffers, at most

// Slabs of a stripe's decode: its k shards and the output, within the
// budget, a multiple of 64 bytes.
size_t SlabBytes(int k) {
  const size_t slab = kDecodeBudget / static_cast<size_t>(k + 1);
  return std::clamp<size_t>(slab / 64 * 64, 64 << 10, 4 << 20);
}

wire::FailedHolder Bad(const wire::ShardSource& s, int64_t step) {
  return {s.holder, s.rank == wire::kParityRank ? wire::kParityRank : s.rank, step};
}

// The answer of `holder` to `ask` (a header_only get_shard: nothing follows).
StatusOr<wire::ShardReply> AskHeader(const std::map<int, std::string>& addresses, int holder,
                                     const net::Trust& trust, const std::string& client_id,
                                     const wire::GetShardRequest& ask) {
  auto it = addresses.find(holder);
  if (it == addresses.end())
    return UnavailableError("no address for node " + std::to_string(holder));
  STRATA_ASSIGN_OR_RETURN(Endpoint to, ParseEndpoint(it->second));
  STRATA_ASSIGN_OR_RETURN(RpcClient client, RpcClient::Connect(to, trust, client_id));
  STRATA_ASSIGN_OR_RETURN(json answer, client.Call(ask.ToJson(), kCallTimeout));
  return wire::ShardReply::FromJson(answer);
}

// One shard of a stripe being read: its connection, what its holder said
// and what it must hash to.
struct Reading {
  wire::ShardSource source;
  std::optional<RpcClient> client;
  wire::ShardReply reply;
  uint64_t length = 0;  // bytes that follow
  uint64_t xxh3 = 0;    // what they must hash to
  Xxh3Stream hash;
  std::vector<uint8_t> buf;
};

// Files of the step being rebuilt, opened once for writing.
class Output {
 public:
  Output(std::string dir, const StepIndex& index) : dir_(std::move(dir)), index_(index) {}
  // Writes `n` bytes at `offset` of the step's stream.
  Status Write(uint64_t offset, const uint8_t* data, uint64_t n) {
    for (const wire::FileRange& r : wire::StreamSlice(index_, offset, n)) {
      STRATA_ASSIGN_OR_RETURN(int fd, Fd(r.file));
      for (uint64_t done = 0; done < r.length;) {
        ssize_t w = ::pwrite(fd, data, static_cast<size_t>(r.length - done),
                             static_cast<off_t>(r.offset + done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0)
          return ErrnoToStatus(errno, "write " + JoinPath(dir_, index_.files[r.file].path));
        done += static_cast<uint64_t>(w);
        data += w;
      }
    }
    return Status::Ok();
  }
  Status Sync() {
    for (auto& [f, fd] : fds_) {
      if (::fdatasync(fd.get()) != 0) {
        return ErrnoToStatus(errno, "fsync " + JoinPath(dir_, index_.files[f].path));
      }
    }
    return Status::Ok();
  }

 private:
  StatusOr<int> Fd(size_t file) {
    auto it = fds_.find(file);
    if (it != fds_.end()) return it->second.get();
    const std::string path = JoinPath(dir_, index_.files[file].path);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) return ErrnoToStatus(errno, "open " + path);
    return fds_.emplace(file, std::move(fd)).first->second.get();
  }
  const std::string dir_;
  const StepIndex& index_;
  std::map<size_t, UniqueFd> fds_;
};

}  // namespace

Status CodedTier::Decode(const wire::StepKey& key, uint64_t digest,
                         const wire::DecodeSource& source,
                         const std::map<int, std::string>& addresses, const std::string& client_id,
                         std::vector<wire::FailedHolder>* bad) {
  const ec::Group& g = source.group;
  if (g.Position(key.rank) < 0 || source.stripes.size() != static_cast<size_t>(g.k())) {
    return InvalidArgumentError("the plan decodes " + key.ToString() + " from group " +
                                g.ToString() + " with " + std::to_string(source.stripes.size()) +
                                " stripes");
  }
  // The step's index, from the header of a parity shard that codes it.
  std::optional<StepIndex> index;
  Status last = NotFoundError("the plan for " + key.ToString() + " names no parity shard");
  for (const wire::StripeSource& stripe : source.stripes) {
    for (const wire::ShardSource& shard : stripe.shards) {
      if (index || shard.rank != wire::kParityRank) continue;
      wire::GetShardRequest ask;
      ask.key = key;
      ask.group = g;
      ask.parity = true;
      ask.stripe = stripe.stripe;
      ask.row = shard.index - g.k();
      ask.index_of = key.rank;
      ask.header_only = true;
      StatusOr<wire::ShardReply> reply =
          AskHeader(addresses, shard.holder, options_.trust, client_id, ask);
      if (reply.ok() && reply->index && reply->index->digest == digest) {
        index = std::move(reply->index);
      } else {
        bad->push_back(Bad(shard, key.step));
        last = reply.ok() ? DataLossError("node " + std::to_string(shard.holder) +
                                          "'s parity holds another step of node " +
                                          std::to_string(key.rank))
                          : reply.status();
      }
    }
  }
  if (!index) return last.WithContext("the index of " + key.ToString());
  STRATA_ASSIGN_OR_RETURN(std::string dir, store_->NewIncomingDir());
  Mutex bad_mu;
  std::vector<wire::FailedHolder> failed;
  Status s = CreateStepFiles(dir, *index, store_);
  if (s.ok()) {
    s = RunParallel(source.stripes.size(), static_cast<size_t>(std::max(1, options_.data_streams)),
                    [&](size_t i, const auto&) {
                      std::vector<wire::FailedHolder> mine;
                      Status r = DecodeStripe(key, *index, g, source.stripes[i], addresses,
                                              client_id, dir, &mine);
                      MutexLock l(&bad_mu);
                      failed.insert(failed.end(), mine.begin(), mine.end());
                      return r;
                    });
  }
  if (s.ok()) {
    s = store_->Adopt(dir, key, *index);
    if (!s.ok()) {
      // Every shard matched its checksum, yet the step does not verify: the
      // parity was coded from other bytes. None of it is trusted again.
      std::set<int> holders;
      for (const wire::StripeSource& stripe : source.stripes) {
        for (const wire::ShardSource& shard : stripe.shards) {
          if (shard.rank == wire::kParityRank && holders.insert(shard.holder).second) {
            failed.push_back(Bad(shard, key.step));
          }
        }
      }
      s = DataLossError("the step decoded does not verify: " + std::string(s.message()));
    }
  }
  bad->insert(bad->end(), failed.begin(), failed.end());
  if (!s.ok()) {
    store_->env()->RemoveAll(dir).IgnoreError();
    return s.WithContext("decoding " + key.ToString() + " from group " + g.ToString());
  }
  return Status::Ok();
}

// One stripe: the parity shards' headers first (they say how long every
// chunk is and what it hashes to), then the member chunks of the digests
// they were coded from; then slab by slab, a slab from every shard, the
// lost chunk's slab rebuilt and written where it belongs in the step.
Status CodedTier::DecodeStripe(const wire::StepKey& key, const StepIndex& index, const ec::Group& g,
                               const wire::StripeSource& stripe,
                               const std::map<int, std::string>& addresses,
                               const std::string& client_id, const std::string& dir,
                               std::vector<wire::FailedHolder>* bad) {
  const ec::GroupLayout layout = g.layout();
  const int k = g.k();
  const int lost_member = g.Position(key.rank);
  const int chunk = layout.ChunkOf(lost_member, stripe.stripe);
  const std::vector<int> contributors = layout.Contributors(stripe.stripe);
  const int lost = static_cast<int>(
      std::find(contributors.begin(), contributors.end(), lost_member) - contributors.begin());
  if (chunk < 0 || stripe.shards.size() != static_cast<size_t>(k)) {
    return InvalidArgumentError("stripe " + std::to_string(stripe.stripe) + " does not rebuild " +
                                key.ToString());
  }
  std::vector<Reading> shards(stripe.shards.size());
  for (size_t i = 0; i < shards.size(); ++i) shards[i].source = stripe.shards[i];
  auto call = [&](Reading& r, const wire::GetShardRequest& ask) -> Status {
    auto it = addresses.find(r.source.holder);
    if (it == addresses.end()) {
      return UnavailableError("no address for node " + std::to_string(r.source.holder));
    }
    STRATA_ASSIGN_OR_RETURN(Endpoint to, ParseEndpoint(it->second));
    STRATA_ASSIGN_OR_RETURN(RpcClient c, RpcClient::Connect(to, options_.trust, client_id));
    r.client.emplace(std::move(c));
    STRATA_ASSIGN_OR_RETURN(json answer, r.client->Call(ask.ToJson(), kCallTimeout));
    STRATA_ASSIGN_OR_RETURN(r.reply, wire::ShardReply::FromJson(answer));
    r.length = r.reply.length;
    return Status::Ok();
  };
  auto fail = [&](const Reading& r, const Status& why) {
    bad->push_back(Bad(r.source, key.step));
    return why.WithContext("stripe " + std::to_string(stripe.stripe) + " shard " +
                           std::to_string(r.source.index) + " from node " +
                           std::to_string(r.source.holder));
  };
  // Parity first: its header records every chunk of the stripe.
  std::map<int, wire::Contribution> chunks;  // by member rank
  uint64_t stripe_length = 0;
  bool have_parity = false;
  for (Reading& r : shards) {
    if (r.source.rank != wire::kParityRank) continue;
    wire::GetShardRequest ask;
    ask.key = key;
    ask.group = g;
    ask.parity = true;
    ask.stripe = stripe.stripe;
    ask.row = r.source.index - k;
    if (Status s = call(r, ask); !s.ok()) return fail(r, s);
    r.xxh3 = r.reply.xxh3;
    if (have_parity && r.length != stripe_length) {
      return fail(r, DataLossError("parity rows of one stripe differ in length"));
    }
    stripe_length = r.length;
    have_parity = true;
    for (const wire::Contribution& c : r.reply.contributions) {
      auto [it, fresh] = chunks.emplace(c.rank, c);
      if (!fresh && (it->second.xxh3 != c.xxh3 || it->second.length != c.length)) {
        return fail(r, DataLossError("parity rows of one stripe record different chunks"));
      }
    }
  }
  auto mine = chunks.find(key.rank);
  if (!have_parity || mine == chunks.end() || mine->second.step_digest != index.digest) {
    return DataLossError("stripe " + std::to_string(stripe.stripe) + " has no parity coded from " +
                         key.ToString() + " as planned");
  }
  for (Reading& r : shards) {
    if (r.source.rank == wire::kParityRank) continue;
    auto c = chunks.find(r.source.rank);
    if (c == chunks.end()) return fail(r, DataLossError("its chunk is not in the parity"));
    wire::GetShardRequest ask;
    ask.key = {key.job, r.source.rank, key.step};
    ask.digest = c->second.step_digest;
    ask.group = g;
    ask.chunk = c->second.chunk;
    if (Status s = call(r, ask); !s.ok()) return fail(r, s);
    if (r.length != c->second.length) {
      return fail(r, DataLossError("a chunk of " + std::to_string(r.length) + " bytes, coded as " +
                                   std::to_string(c->second.length)));
    }
    r.xxh3 = c->second.xxh3;
  }
  // The lost chunk's place in its step.
  const uint64_t cb = ec::ChunkBytes(index.total_bytes, k);
  const uint64_t base = std::min(index.total_bytes, cb * static_cast<uint64_t>(chunk));
  const uint64_t lost_length = mine->second.length;
  if (lost_length != std::min(cb, index.total_bytes - base) || lost_length > stripe_length) {
    return DataLossError("stripe " + std::to_string(stripe.stripe) + " codes " +
                         std::to_string(lost_length) + " bytes of chunk " + std::to_string(chunk) +
                         " of " + key.ToString() + ", its index says otherwise");
  }
  STRATA_ASSIGN_OR_RETURN(ec::Codec codec, ec::Codec::Create(g.code()));
  const size_t slab = SlabBytes(k);
  std::vector<int> have;
  std::vector<const uint8_t*> in;
  for (Reading& r : shards) {
    r.buf.resize(slab);
    have.push_back(r.source.index);
    in.push_back(r.buf.data());
  }
  std::vector<uint8_t> out(slab);
  uint8_t* outs[] = {out.data()};
  const int lost_shard[] = {lost};
  Output output(dir, index);
  std::deque<net::StallLimitScope> stalls;  // not movable: a deque keeps them in place
  for (Reading& r : shards) stalls.emplace_back(r.client->socket(), kDataStallLimit);
  const net::Deadline deadline = DataDeadline();
  for (uint64_t at = 0; at < stripe_length; at += slab) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(slab, stripe_length - at));
    for (Reading& r : shards) {
      const size_t got =
          at >= r.length ? 0 : static_cast<size_t>(std::min<uint64_t>(n, r.length - at));
      if (got > 0) {
        if (Status s = r.client->socket().RecvAll(r.buf.data(), got, deadline); !s.ok()) {
          return fail(r, s);
        }
        r.hash.Update(r.buf.data(), got);
      }
      std::fill(r.buf.begin() + static_cast<ptrdiff_t>(got), r.buf.begin() + n, 0);
    }
    Status s = codec.Reconstruct(have, in, lost_shard, outs, n);
    if (s.ok() && at < lost_length) {
      s = output.Write(base + at, out.data(), std::min<uint64_t>(n, lost_length - at));
    }
    STRATA_RETURN_IF_ERROR(s.WithContext("decoding stripe " + std::to_string(stripe.stripe) +
                                         " of " + key.ToString()));
  }
  for (Reading& r : shards) {
    if (r.hash.Digest() != r.xxh3) return fail(r, DataLossError("checksum mismatch"));
  }
  return output.Sync();
}

}  // namespace strata::agent
