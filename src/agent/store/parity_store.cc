// Copyright 2026 The Strata Authors.
#include "agent/store/parity_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "agent/store/store.h"
#include "ec/codec.h"
#include "util/crash_point.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/json_bounded.h"
#include "util/logging.h"
#include "util/scratch.h"
#include "wire/codec.h"
#include "wire/coded.h"

namespace strata::agent {

using json = nlohmann::json;

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'P', 'S'};
constexpr uint32_t kVersion = 1;
constexpr size_t kFooterBytes = 24;
constexpr uint64_t kMaxHeaderBytes = 64ull << 20;
// Parity is rewritten, and a contribution read, in slabs of this size.
constexpr size_t kSlab = 4 << 20;

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetU(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

std::string ShardName(const ParityKey& key) {
  return key.group + "-s" + std::to_string(key.stripe) + "-r" + std::to_string(key.row);
}

// The file a shard that is still receiving contributions last replaced: the
// next contribution is written into its pages (on a tmpfs several times
// faster than into new ones). It goes when the shard is complete, and at
// Open.
std::string SpareOf(const std::string& path) {
  return JoinPath(Dirname(path), ".strata-spare-" + path.substr(path.rfind('/') + 1));
}

// Checks that `h` describes a row of a stripe of a valid group and that
// every contribution feeds that stripe, once per contributor.
Status CheckHeader(const ParityHeader& h) {
  STRATA_RETURN_IF_ERROR(h.group.Validate());
  STRATA_RETURN_IF_ERROR(wire::ValidateStepKey({h.job, 0, h.step}));
  const ec::GroupLayout layout = h.group.layout();
  if (h.stripe < 0 || h.stripe >= layout.stripes() || h.row < 0 || h.row >= layout.m()) {
    return InvalidArgumentError("no row " + std::to_string(h.row) + " of stripe " +
                                std::to_string(h.stripe) + " in group " + h.group.ToString());
  }
  std::set<int> seen;
  for (const wire::Contribution& c : h.contributions) {
    const int p = h.group.Position(c.rank);
    if (p < 0 || layout.ChunkOf(p, h.stripe) != c.chunk || !seen.insert(c.rank).second ||
        c.length > h.length) {
      return InvalidArgumentError("node " + std::to_string(c.rank) + "'s chunk " +
                                  std::to_string(c.chunk) + " does not feed stripe " +
                                  std::to_string(h.stripe) + " of group " + h.group.ToString());
    }
  }
  return Status::Ok();
}

}  // namespace

std::string ParityKey::ToString() const {
  return job + "/" + std::to_string(step) + "/" + ShardName(*this);
}

const wire::Contribution* ParityHeader::Find(int rank) const {
  for (const wire::Contribution& c : contributions) {
    if (c.rank == rank) return &c;
  }
  return nullptr;
}

namespace {

// A contribution as a header keeps it: with its step's index, unlike the
// wire's (wire/coded.h).
const wire::Codec<wire::Contribution>& HeaderContributionCodec() {
  using C = wire::Contribution;
  using wire::Presence;
  return wire::Codec<C>::Once("a contribution", [](wire::Codec<C>& c) {
    c.Int("rank", &C::rank, wire::kInt64Min, wire::kInt64Max)
        .Int("chunk", &C::chunk, wire::kInt64Min, wire::kInt64Max)
        .Unsigned("length", &C::length)
        .Digest("xxh3", &C::xxh3)
        .Digest("digest", &C::step_digest)
        .Nested<StepIndex>("index", &C::index, Presence::kRequired, &wire::ReadStepIndex,
                           &wire::WriteStepIndex);
  });
}

const wire::Codec<ParityHeader>& ParityHeaderCodec() {
  using H = ParityHeader;
  using wire::Presence;
  return wire::Codec<H>::Once("the parity header", [](wire::Codec<H>& c) {
    c.Text("job", &H::job)
        .Int("step", &H::step, wire::kInt64Min, wire::kInt64Max)
        .Object("group", &H::group, Presence::kRequired, wire::GroupCodec())
        .Int("stripe", &H::stripe, wire::kInt64Min, wire::kInt64Max)
        .Int("row", &H::row, wire::kInt64Min, wire::kInt64Max)
        .Unsigned("length", &H::length)
        .Digest("xxh3", &H::xxh3)
        .List("contributions", &H::contributions, Presence::kRequired, HeaderContributionCodec());
  });
}

}  // namespace

std::string EncodeParityHeader(const ParityHeader& h) {
  return ParityHeaderCodec().Write(h).dump();
}

StatusOr<ParityHeader> DecodeParityHeader(std::string_view text, std::string_view source) {
  const std::string what(source);
  const json j = ParseBounded(text);
  auto bad = [&](const std::string& why) { return DataLossError(what + ": " + why); };
  if (j.is_discarded()) return bad("the parity header is not JSON");
  StatusOr<ParityHeader> h = ParityHeaderCodec().Parse(j);
  if (!h.ok()) return bad(std::string(h.status().message()));
  Status s = CheckHeader(*h);
  if (!s.ok()) return bad(std::string(s.message()));
  return h;
}

StatusOr<std::unique_ptr<ParityStore>> ParityStore::Open(const std::string& dir, Env* env,
                                                         std::chrono::milliseconds contended_stall,
                                                         SteadyClock* clock) {
  std::unique_ptr<ParityStore> p(new ParityStore(dir, env, contended_stall, clock));
  STRATA_RETURN_IF_ERROR(CreateDirs(env, dir));
  STRATA_RETURN_IF_ERROR(p->Load());
  return p;
}

// <dir>/<job>/<step>/<shard>: temporaries go, unreadable shards go (logged).
Status ParityStore::Load() {
  STRATA_ASSIGN_OR_RETURN(std::vector<DirEntry> jobs, env_->ListDir(dir_));
  for (const DirEntry& job : jobs) {
    const std::string job_dir = JoinPath(dir_, job.name);
    STRATA_ASSIGN_OR_RETURN(std::vector<DirEntry> steps, env_->ListDir(job_dir));
    for (const DirEntry& step : steps) {
      const std::string step_dir = JoinPath(job_dir, step.name);
      STRATA_ASSIGN_OR_RETURN(std::vector<DirEntry> shards, env_->ListDir(step_dir));
      for (const DirEntry& shard : shards) {
        const std::string path = JoinPath(step_dir, shard.name);
        if (shard.name.starts_with(".strata-")) {  // a temporary or a spare
          env_->RemoveFile(path).IgnoreError();
          continue;
        }
        Status s = LoadShard(path);
        if (!s.ok()) {
          Log()->warn("dropping parity shard {}: {}", path, s.message());
          env_->RemoveFile(path).IgnoreError();
        }
      }
    }
  }
  return Status::Ok();
}

Status ParityStore::LoadShard(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto file, env_->OpenReadable(path));
  STRATA_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size < kFooterBytes) return DataLossError(path + ": too short for a parity shard");
  char footer[kFooterBytes];
  STRATA_RETURN_IF_ERROR(file->PRead(size - kFooterBytes, kFooterBytes, footer));
  if (std::memcmp(footer, kMagic, sizeof kMagic) != 0) return DataLossError(path + ": bad magic");
  if (GetU(footer + 8, 4) != kVersion) return DataLossError(path + ": unknown version");
  const uint64_t n = GetU(footer + 12, 4);
  if (n > kMaxHeaderBytes || n + kFooterBytes > size) {
    return DataLossError(path + ": bad header size");
  }
  std::string text(n, '\0');
  STRATA_RETURN_IF_ERROR(file->PRead(size - kFooterBytes - n, n, text.data()));
  if (Xxh3(text.data(), text.size()) != GetU(footer + 16, 8)) {
    return DataLossError(path + ": header checksum mismatch");
  }
  STRATA_ASSIGN_OR_RETURN(ParityHeader h, DecodeParityHeader(text, path));
  if (h.length + n + kFooterBytes != size) return DataLossError(path + ": size mismatch");
  if (PathOf(h.key()) != path) return DataLossError(path + ": the header names another shard");
  MutexLock l(&mu_);
  held_[h.key()] = std::move(h);
  return Status::Ok();
}

std::string ParityStore::PathOf(const ParityKey& key) const {
  return JoinPath(JoinPath(JoinPath(dir_, key.job), std::to_string(key.step)), ShardName(key));
}

void ParityStore::Lock(const ParityKey& key, std::string who, Abort abort) {
  // The wait is real time, the stall clock_'s: looked at again at least
  // this often, so a clock a test moves ends the wait too.
  constexpr auto kStallPoll = std::chrono::milliseconds(50);
  MutexLock l(&mu_);
  for (auto it = busy_.find(key); it != busy_.end(); it = busy_.find(key)) {
    Busy& holder = it->second;
    const auto stale_at = holder.moved + contended_stall_;
    const auto now = clock_->Now();
    if (holder.ended || !holder.abort) {
      unlocked_.Wait(&mu_);
    } else if (now < stale_at) {
      // Or until the holder unlocks; a holder that moved is looked at again.
      unlocked_.WaitFor(&mu_, std::min<SteadyClock::duration>(stale_at - now, kStallPoll));
    } else {
      Log()->warn(
          "parity {}: {} moved no byte for {} ms while another waits for the shard: "
          "ending it",
          key.ToString(), holder.who, contended_stall_.count());
      holder.ended = true;
      holder.abort();  // its read fails, and it unlocks
    }
  }
  busy_.emplace(key, Busy{clock_->Now(), std::move(who), std::move(abort)});
}

bool ParityStore::TryLock(const ParityKey& key) {
  MutexLock l(&mu_);
  return busy_.emplace(key, Busy{clock_->Now(), "", {}}).second;
}

Status ParityStore::ReadNoting(const ParityKey& key, const Reader& read, void* buf, size_t n) {
  constexpr size_t kPiece = 256 << 10;
  for (size_t at = 0; at < n;) {
    const size_t piece = std::min(kPiece, n - at);
    STRATA_RETURN_IF_ERROR(read(static_cast<char*>(buf) + at, piece));
    at += piece;
    MutexLock l(&mu_);
    if (auto it = busy_.find(key); it != busy_.end()) {
      it->second.moved = clock_->Now();
    }
  }
  return Status::Ok();
}

void ParityStore::Unlock(const ParityKey& key) {
  MutexLock l(&mu_);
  busy_.erase(key);
  unlocked_.SignalAll();
}

bool ParityStore::Has(const ParityKey& key, int rank, uint64_t digest) const {
  MutexLock l(&mu_);
  auto it = held_.find(key);
  if (it == held_.end()) return false;
  const wire::Contribution* c = it->second.Find(rank);
  return c != nullptr && c->step_digest == digest;
}

StatusOr<ParityStore::Added> ParityStore::Contribute(const ParityHeader& where,
                                                     const wire::Contribution& c,
                                                     const Reader& read, Abort abort) {
  ParityHeader next;
  next.job = where.job;
  next.step = where.step;
  next.group = where.group;
  next.stripe = where.stripe;
  next.row = where.row;
  next.length = c.length;
  next.contributions = {c};
  STRATA_RETURN_IF_ERROR(CheckHeader(next));
  const ec::GroupLayout layout = next.group.layout();
  const std::vector<int> contributors = layout.Contributors(next.stripe);
  const int shard = static_cast<int>(
      std::find(contributors.begin(), contributors.end(), next.group.Position(c.rank)) -
      contributors.begin());
  const ParityKey key = next.key();
  Lock(key, "node " + std::to_string(c.rank) + "'s chunk " + std::to_string(c.chunk),
       std::move(abort));
  std::optional<ParityHeader> old;
  {
    MutexLock l(&mu_);
    auto it = held_.find(key);
    if (it != held_.end()) old = it->second;
  }
  auto drain = [&] {
    Scratch buf(c.length, kSlab);
    for (uint64_t left = c.length; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      STRATA_RETURN_IF_ERROR(ReadNoting(key, read, buf.get(), n));
      left -= n;
    }
    return Status::Ok();
  };
  Status s;
  Added added = Added::kAdded;
  const wire::Contribution* was = old ? old->Find(c.rank) : nullptr;
  if (was != nullptr && was->step_digest == c.step_digest) {
    added = Added::kAlreadyIn;
    s = drain();
  } else {
    if (was != nullptr) {
      Log()->warn(
          "parity {}: node {} contributes another step {} (digest {}, was {}): starting over",
          key.ToString(), c.rank, next.step, Hex64(c.step_digest), Hex64(was->step_digest));
      old.reset();
    }
    if (old) {
      next.contributions = old->contributions;
      next.contributions.push_back(c);
      next.length = std::max(old->length, c.length);
    }
    s = Rewrite(old ? &*old : nullptr, &next, c, shard, read);
    if (s.ok()) {
      MutexLock l(&mu_);
      held_[key] = next;
    }
  }
  Unlock(key);
  if (!s.ok()) return s;
  return added;
}

// new[i] = old[i] (zero past its end) + coefficient * chunk[i] (zero past
// its end), for i < next->length, hashed as it is written; then the header
// and the footer; then the commit.
Status ParityStore::Rewrite(const ParityHeader* old, ParityHeader* next,
                            const wire::Contribution& c, int shard, const Reader& read) {
  STRATA_ASSIGN_OR_RETURN(ec::Codec codec, ec::Codec::Create(next->group.code()));
  const std::string path = PathOf(next->key());
  STRATA_RETURN_IF_ERROR(CreateDirs(env_, Dirname(path)));
  const std::string tmp = TempPathFor(path);
  const std::string spare = SpareOf(path);
  // A spare's pages are overwritten; without one the temp file is new.
  const bool reused = env_->Exists(spare) && env_->Rename(spare, tmp).ok();
  std::unique_ptr<ReadableFile> in;
  if (old != nullptr) {
    STRATA_ASSIGN_OR_RETURN(in, env_->OpenReadable(path));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out,
                          reused ? env_->OpenWritable(tmp) : env_->CreateWritable(tmp));
  auto fail = [&](const Status& s) {
    out->Close().IgnoreError();
    env_->RemoveFile(tmp).IgnoreError();
    return s;
  };
  // A holder takes k contributions per stripe and save.
  Scratch<uint8_t> parity(next->length, kSlab), chunk(next->length, kSlab);
  const size_t slab = parity.size();
  Xxh3Stream old_hash, chunk_hash, new_hash;
  for (uint64_t at = 0; at < next->length; at += slab) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(slab, next->length - at));
    const size_t from_old = old == nullptr || at >= old->length
                                ? 0
                                : static_cast<size_t>(std::min<uint64_t>(n, old->length - at));
    std::fill(parity.get() + from_old, parity.get() + n, 0);
    if (from_old > 0) {
      Status s = in->PRead(at, from_old, parity.get());
      if (!s.ok()) return fail(s);
      old_hash.Update(parity.get(), from_old);
    }
    const size_t from_chunk =
        at >= c.length ? 0 : static_cast<size_t>(std::min<uint64_t>(n, c.length - at));
    if (from_chunk > 0) {
      Status s = ReadNoting(next->key(), read, chunk.get(), from_chunk);
      if (!s.ok()) return fail(s);
      chunk_hash.Update(chunk.get(), from_chunk);
      codec.Accumulate(next->row, shard, chunk.get(), parity.get(), from_chunk);
    }
    new_hash.Update(parity.get(), n);
    Status s = out->PWrite(at, parity.get(), n);
    if (!s.ok()) return fail(s);
  }
  if (chunk_hash.Digest() != c.xxh3) {
    return fail(DataLossError("node " + std::to_string(c.rank) + "'s chunk " +
                              std::to_string(c.chunk) + " for " + next->key().ToString() +
                              " does not match its checksum"));
  }
  if (old != nullptr && old_hash.Digest() != old->xxh3) {
    return fail(DataLossError("parity " + path + " no longer matches its checksum"));
  }
  next->xxh3 = new_hash.Digest();
  const std::string header = EncodeParityHeader(*next);
  if (header.size() > kMaxHeaderBytes) {  // Load would refuse it
    return fail(ResourceExhaustedError("the header of parity " + path + " would be " +
                                       std::to_string(header.size()) + " bytes (at most " +
                                       std::to_string(kMaxHeaderBytes) + ")"));
  }
  char footer[kFooterBytes];
  std::memcpy(footer, kMagic, sizeof kMagic);
  PutU32(footer + 8, kVersion);
  PutU32(footer + 12, static_cast<uint32_t>(header.size()));
  PutU64(footer + 16, Xxh3(header.data(), header.size()));
  Status s = out->PWrite(next->length, header.data(), header.size());
  if (s.ok()) s = out->PWrite(next->length + header.size(), footer, kFooterBytes);
  if (s.ok()) s = out->Truncate(next->length + header.size() + kFooterBytes);  // a spare's tail
  if (s.ok()) s = out->Sync();
  if (!s.ok()) return fail(s);
  STRATA_RETURN_IF_ERROR(out->Close());
  // The shard being replaced stays as the spare while more contributions
  // are due (a second name for its inode; the rename below keeps it).
  if (old != nullptr && !next->complete()) ::link(path.c_str(), spare.c_str());
  CrashPoint("parity.before_commit");
  Status committed = CommitFile(env_, tmp, path);
  // Not replaced, the shard would have the spare as its second name: the
  // next contribution would write into the shard held.
  if (!committed.ok() || next->complete()) env_->RemoveFile(spare).IgnoreError();
  return committed;
}

std::map<ParityKey, ParityHeader> ParityStore::List() const {
  MutexLock l(&mu_);
  return held_;
}

StatusOr<ParityHeader> ParityStore::Get(const ParityKey& key) const {
  MutexLock l(&mu_);
  auto it = held_.find(key);
  if (it == held_.end()) return NotFoundError("no parity shard " + key.ToString() + " here");
  return it->second;
}

Status ParityStore::Verify(const ParityKey& key) const {
  STRATA_ASSIGN_OR_RETURN(ParityHeader h, Get(key));
  const std::string path = PathOf(key);
  STRATA_ASSIGN_OR_RETURN(auto file, env_->OpenReadable(path));
  Scratch buf(h.length, kSlab);
  const size_t slab = buf.size();
  Xxh3Stream hash;
  for (uint64_t at = 0; at < h.length; at += slab) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(slab, h.length - at));
    STRATA_RETURN_IF_ERROR(file->PRead(at, n, buf.get()));
    hash.Update(buf.get(), n);
  }
  if (hash.Digest() != h.xxh3) return DataLossError(path + ": parity checksum mismatch");
  return Status::Ok();
}

Status ParityStore::Remove(const ParityKey& key) {
  Lock(key);  // not under a contribution being written
  Status s = RemoveLocked(key);
  Unlock(key);
  return s;
}

Status ParityStore::RemoveIfIdle(const ParityKey& key, const ParityHeader* listed) {
  if (!TryLock(key)) return UnavailableError("parity " + key.ToString() + " is being written");
  if (listed != nullptr) {
    bool holds_listed = false;
    {
      MutexLock l(&mu_);
      if (auto it = held_.find(key); it != held_.end()) {
        for (const wire::Contribution& c : listed->contributions) {
          const wire::Contribution* now = it->second.Find(c.rank);
          holds_listed |= now != nullptr && now->step_digest == c.step_digest;
        }
      }
    }
    if (!holds_listed) {
      Unlock(key);
      return FailedPreconditionError("parity " + key.ToString() +
                                     " holds none of the contributions listed earlier");
    }
  }
  Status s = RemoveLocked(key);
  Unlock(key);
  return s;
}

// REQUIRES: `key` locked (Lock), so no contribution is being written to it.
Status ParityStore::RemoveLocked(const ParityKey& key) {
  {
    MutexLock l(&mu_);
    held_.erase(key);
  }
  const std::string path = PathOf(key);
  Status s = env_->RemoveFile(path);
  env_->RemoveFile(SpareOf(path)).IgnoreError();  // while incomplete
  auto left = env_->ListDir(Dirname(path));
  if (left.ok() && left->empty()) env_->RemoveAll(Dirname(path)).IgnoreError();
  return s;
}

uint64_t ParityStore::BytesHeld() const {
  MutexLock l(&mu_);
  uint64_t total = 0;
  for (const auto& [key, h] : held_) total += h.length;
  return total;
}

}  // namespace strata::agent
