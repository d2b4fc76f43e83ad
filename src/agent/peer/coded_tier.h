// Copyright 2026 The Strata Authors.
//
// CodedTier: the node's part in a coded peer tier (redundancy xor or
// rs(k,m); docs/agent-design.md, "Coded redundancy"). In place of copies on
// peers, each node of a group of k+m cuts its step into k chunks (the step
// read as one stream, its files in index order; ec::ChunkBytes each) and
// sends chunk c to the m holders of the parity rows of its c-th stripe
// (ec::GroupLayout), which add it into their shards (ParityStore). A node
// thus holds its own step and m/k of one in parity, and any m lost members
// of a group can be rebuilt from the others.
//
//   * Contribute (sending, on Replication's thread): the step is read and
//     verified first (a chunk's bytes cannot be checked by its receiver,
//     only against the checksum its sender computed), then every chunk is
//     hashed and sent to its holders over up to `data_streams` connections;
//   * put_shard, get_shard (receiving, on the server's long-call threads):
//     a chunk added to a shard; a shard read for a decode, a member's chunk
//     cut from its copy or a parity row;
//   * Decode (a restore): a lost member's step rebuilt stripe by stripe from
//     the k shards the plan names, read in slabs from k connections at
//     once; every shard is checked against its checksum as it arrives (a
//     chunk against the one its parity shards recorded, a parity row
//     against its own), the rebuilt step against its index before it is
//     adopted. A shard that fails names its holder for the coordinator.
//
// Thread-safe; holds no lock while it does I/O.
#ifndef STRATA_AGENT_PEER_CODED_TIER_H_
#define STRATA_AGENT_PEER_CODED_TIER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/plan/planner.h"
#include "agent/rpc/client.h"
#include "agent/store/parity_store.h"
#include "agent/store/store.h"
#include "ec/layout.h"
#include "net/cancellation.h"
#include "net/socket.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "wire/coded.h"
#include "wire/coordination.h"

namespace strata::agent {

class CodedTier {
 public:
  struct Options {
    net::Trust trust;       // the job's secret and TLS, for peers
    std::string local_dir;  // for the free-space check
    int data_streams = 4;
  };

  CodedTier(Options options, Store* store, ParityStore* parity, SteadyClock* clock);

  // Sends this node's step `key` (a member of `group`) to every holder of a
  // parity row of its stripes, at `addresses` (node rank -> host:port).
  // OK when every holder has it; otherwise the first failure, naming the
  // holder. `done` (may be null) gets the addresses whose rows all hold it.
  // Once `ticket` is cancelled the chunks in flight end at once and no more
  // go: the answer is then Cancelled.
  Status Contribute(const wire::StepKey& key, const ec::Group& group,
                    const std::map<int, std::string>& addresses, std::vector<std::string>* done,
                    const net::Cancellation::Ticket& ticket = {});

  // put_shard: `my_rank` must hold the row asked for.
  StatusOr<json> HandlePutShard(const wire::PutShardRequest& request, net::Socket& socket,
                                int my_rank);
  // get_shard: a parity row held here, or a chunk of a copy held here.
  StatusOr<json> HandleGetShard(const wire::GetShardRequest& request, net::Socket& socket);

  // Rebuilds step `key` (digest `digest`) from `source`'s shards, whose
  // holders listen at `addresses`, into the store. Holders whose shard
  // failed its checksum go to `bad` ([holder, member rank, step] for a
  // chunk, [holder, kParityHolderRank, step] for parity).
  Status Decode(const wire::StepKey& key, uint64_t digest, const wire::DecodeSource& source,
                const std::map<int, std::string>& addresses, const std::string& client_id,
                std::vector<wire::FailedHolder>* bad);

  // The steps of `job` that other members of `group` have begun to code:
  // those this node holds a shard of for the group, complete or still
  // receiving (a member's chunks never go to its own rows, so every
  // contribution here is another member's).
  std::set<int64_t> StepsCodedByOthers(const std::string& job, const ec::Group& group) const;

  // The complete parity shards held for `job`, as a registration reports
  // them.
  std::vector<wire::HeldParity> Inventory(const std::string& job) const;
  // Keeps the shards of `job` whose step StepsToKeep keeps given `floor`,
  // `bounded` and `previous_floor` (retention.h), and those of its newest
  // step with a complete shard; the rest go (all of another job's).
  void CollectGarbage(const std::string& job, int64_t floor, bool bounded, int64_t previous_floor);
  // The shards of `job`'s steps above `step`.
  std::map<ParityKey, ParityHeader> ListAbove(const std::string& job, int64_t step) const;
  // Removes the shards `listed` (from ListAbove: a history the job left
  // when it restored a step), each while it still holds a contribution it
  // held then (one that started over since holds only the new history's).
  // Returns how many went.
  int DiscardListed(const std::map<ParityKey, ParityHeader>& listed);

 private:
  struct Chunk;  // one chunk of a step being contributed
  Status VerifyOnce(const wire::StepKey& key) EXCLUDES(mu_);
  // Removes a shard unless a contribution is being written to it (or,
  // given `listed`, it holds none of `listed`'s; ParityStore::RemoveIfIdle);
  // whether it went.
  bool RemoveShard(const ParityKey& key, const ParityHeader* listed = nullptr);
  Status Send(const Chunk& chunk, const wire::StepKey& key, const StepIndex& index,
              const ec::Group& group, int stripe, int row, const std::string& address,
              const net::Cancellation::Ticket& ticket);
  Status DecodeStripe(const wire::StepKey& key, const StepIndex& index, const ec::Group& group,
                      const wire::StripeSource& stripe, const std::map<int, std::string>& addresses,
                      const std::string& client_id, const std::string& dir,
                      std::vector<wire::FailedHolder>* bad);

  const Options options_;
  Store* const store_;
  ParityStore* const parity_;
  SteadyClock* const clock_;
  mutable Mutex mu_;
  // Connections to holders, kept between chunks: a save sends M chunks to
  // each of its group's other members, and every connection costs a TCP
  // and a TLS handshake and the job's authentication.
  RpcPool connections_;
  // The last own step read and verified before its chunks went out: a
  // retry does not read it again.
  std::optional<std::pair<wire::StepKey, uint64_t>> verified_ GUARDED_BY(mu_);
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_PEER_CODED_TIER_H_
